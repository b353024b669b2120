//! Inputs: the corpus, its segmentation into texts, and the tokenizers
//! (real files from `.data`, a path from the config, or trained on the corpus).

use crate::plan::Case;
use crate::suites::skip;
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainerBuilder};
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::normalizers::{BertNormalizer, NFKC, Nmt, Sequence};
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer, TokenizerImpl};

/// The multilingual sample (accented Latin, Greek, Cyrillic, CJK, Arabic,
/// emoji, combining marks), committed so normalization always has work.
pub(crate) const MULTILINGUAL: &str = include_str!("multilingual.txt");

/// How the corpus is cut into the texts one iteration encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Every non-empty line (a verse line of the KJV: about 50 bytes).
    Line,
    /// Consecutive lines joined by `\n` until at least 512 bytes.
    Paragraph,
    /// Consecutive lines joined by `\n` up to 4096 bytes (a longer line stays whole).
    Chunk4k,
}

impl Length {
    /// Valid `length` values, in the order of the error message.
    pub const NAMES: &'static [&'static str] = &["line", "paragraph", "4k"];

    /// The `length` parameter of `case`.
    pub fn of(case: &Case) -> Result<Self> {
        Ok(match super::choice(case, "length", Self::NAMES)? {
            "line" => Self::Line,
            "paragraph" => Self::Paragraph,
            _ => Self::Chunk4k,
        })
    }
}

/// Cuts `text` into texts of the given `length` until `budget` bytes are
/// collected (every text when `budget` is 0). `scripts/compare-python-tokenizers.py`
/// does exactly the same, so both sides encode identical inputs.
pub fn segments(text: &str, length: Length, budget: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<String>, total: &mut usize| {
        if !cur.is_empty() {
            *total += cur.len();
            out.push(std::mem::take(cur));
        }
    };
    for line in text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()) {
        if budget > 0 && total >= budget {
            break;
        }
        match length {
            Length::Line => {
                cur.push_str(line);
                flush(&mut cur, &mut out, &mut total);
            }
            Length::Paragraph => {
                if !cur.is_empty() {
                    cur.push('\n');
                }
                cur.push_str(line);
                if cur.len() >= 512 {
                    flush(&mut cur, &mut out, &mut total);
                }
            }
            Length::Chunk4k => {
                if !cur.is_empty() && cur.len() + 1 + line.len() > 4096 {
                    flush(&mut cur, &mut out, &mut total);
                }
                if !cur.is_empty() {
                    cur.push('\n');
                }
                cur.push_str(line);
            }
        }
    }
    if budget == 0 || total < budget {
        flush(&mut cur, &mut out, &mut total);
    }
    out
}

/// The corpus named by the `corpus` parameter: `kjv` (from `.data`),
/// `multilingual` (built in), or a path to any UTF-8 text file.
pub(crate) fn corpus(case: &Case) -> Result<Arc<String>> {
    let name = case.str("corpus")?;
    static CACHE: Mutex<Option<HashMap<String, Arc<String>>>> = Mutex::new(None);
    if let Some(text) = CACHE.lock().ok().and_then(|c| c.as_ref().and_then(|m| m.get(&name).cloned())) {
        return Ok(text);
    }
    let text = match name.as_str() {
        "multilingual" => MULTILINGUAL.to_string(),
        "kjv" => {
            let path = crate::data::find("kjv.txt")
                .map_err(|why| skip(format!("corpus kjv: {why}; or set `corpus` to a text file")))?;
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?
        }
        path if looks_like_path(path) => std::fs::read_to_string(path)
            .with_context(|| format!("case {}: cannot read corpus file {path}", case.id))?,
        other => bail!("case {}: `corpus` = `{other}` is not valid; valid: {CORPUS_NAMES}", case.id),
    };
    if text.trim().is_empty() {
        bail!("case {}: corpus `{name}` is empty", case.id);
    }
    let text = Arc::new(text);
    if let Ok(mut c) = CACHE.lock() {
        c.get_or_insert_with(HashMap::new).insert(name, text.clone());
    }
    Ok(text)
}

/// Valid `corpus` values, for error messages.
pub(crate) const CORPUS_NAMES: &str = "kjv, multilingual, or a path to a UTF-8 text file";

/// Whether [`corpus`] would accept `name` (without reading it).
pub(crate) fn corpus_is_valid(name: &str) -> bool {
    matches!(name, "kjv" | "multilingual") || looks_like_path(name)
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".txt") || s.ends_with(".json")
}

/// The texts of a case: its corpus cut at `length`, `input_bytes` of them.
pub(crate) fn case_texts(case: &Case) -> Result<Vec<String>> {
    let text = corpus(case)?;
    let length = Length::of(case)?;
    let budget = case.usize("input_bytes")?;
    let texts = segments(&text, length, budget);
    if texts.is_empty() {
        bail!("case {}: the corpus has no non-empty line", case.id);
    }
    Ok(texts)
}

/// Names of the real vocabularies and what each needs in the data folder.
pub(crate) const REAL: &[(&str, &[&str])] = &[
    ("gpt2", &["gpt2/encoder.json", "gpt2/vocab.bpe"]),
    ("bert", &["minilm/tokenizer.json"]),
    ("llama2", &["llama2/tokenizer.json"]),
];

/// Valid `vocab` values, for error messages.
pub(crate) const VOCAB_NAMES: &str = "gpt2, bert, llama2, gpt2-trained, bert-trained, llama2-trained, \
unigram-trained, or a path (a tokenizer.json, a BERT vocab.txt, or a folder with GPT-2's encoder.json + vocab.bpe)";

/// The suite file with every real vocabulary whose files are absent from
/// `data` replaced by its `-trained` fallback, so case ids say what runs.
pub(crate) fn with_fallbacks(spec: &str, data: &crate::data::Lookup) -> String {
    let absent: Vec<&str> = REAL
        .iter()
        .filter(|(_, files)| files.iter().any(|f| data.find(f).is_err()))
        .map(|(name, _)| *name)
        .collect();
    if absent.is_empty() {
        return spec.to_string();
    }
    let Ok(mut table) = spec.parse::<toml::Table>() else { return spec.to_string() };
    if let Some(toml::Value::Array(benches)) = table.get_mut("benchmark") {
        for b in benches.iter_mut() {
            let Some(toml::Value::Array(grids)) = b.get_mut("grid") else { continue };
            for g in grids.iter_mut() {
                let Some(toml::Value::Array(vocabs)) = g.get_mut("vocab") else { continue };
                for v in vocabs.iter_mut() {
                    if let Some(name) = v.as_str()
                        && absent.contains(&name)
                    {
                        *v = toml::Value::String(format!("{name}-trained"));
                    }
                }
            }
        }
    }
    toml::to_string(&table).unwrap_or_else(|_| spec.to_string())
}

/// What family a tokenizer belongs to, which decides how it is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// Byte-level BPE (GPT-2): decode(encode(x)) == x exactly.
    ByteLevel,
    /// BERT WordPiece: lowercases and drops accents, so decode is lossy.
    WordPiece,
    /// SentencePiece-style (Metaspace, byte fallback or Unigram): lossless
    /// up to its normalizer.
    SentencePiece,
    /// A file from the config whose family is not known.
    Other,
}

/// A ready tokenizer and what it is.
pub(crate) struct Loaded {
    /// The tokenizer, shared by every case of the run that names it.
    pub tok: Arc<Tokenizer>,
    /// Its family.
    pub family: Family,
    /// The fixture key of its known ids (`gpt2`, `bert`, `llama2`) for real files.
    pub known_ids: Option<&'static str>,
    /// Whether it was trained here (fallback or `unigram-trained`).
    pub trained: bool,
}

/// The tokenizer of the case's `vocab` parameter; trained ones are trained
/// on the case's corpus once per process.
pub(crate) fn tokenizer(case: &Case) -> Result<Loaded> {
    let vocab = case.str("vocab")?;
    if let Some((name, files)) = REAL.iter().find(|(n, _)| *n == vocab) {
        let data = crate::data::lookup();
        let paths =
            files.iter().map(|f| data.find(f)).collect::<Result<Vec<PathBuf>, String>>().map_err(|why| {
                skip(format!("vocab {name}: {why} (the default grid uses {name}-trained then)"))
            })?;
        let key = format!("{name}@{}", paths[0].display());
        let tok = cached(&key, || match *name {
            "gpt2" => gpt2_from_files(&paths[0], &paths[1]),
            _ => from_json(&paths[0]),
        })?;
        let family = match *name {
            "gpt2" => Family::ByteLevel,
            "bert" => Family::WordPiece,
            _ => Family::SentencePiece,
        };
        let fixture = REAL.iter().map(|(n, _)| *n).find(|n| n == name);
        return Ok(Loaded { tok, family, known_ids: fixture, trained: false });
    }
    if let Some(kind) = vocab.strip_suffix("-trained") {
        let Some(family) = trained_family(kind) else {
            bail!("case {}: `vocab` = `{vocab}` is not valid; valid: {VOCAB_NAMES}", case.id)
        };
        let text = corpus(case)?;
        let key = format!("{vocab}@{}", case.str("corpus")?);
        let tok = cached(&key, || train_like(kind, &text))?;
        return Ok(Loaded { tok, family, known_ids: None, trained: true });
    }
    if looks_like_path(&vocab) {
        let p = PathBuf::from(&vocab);
        let tok = cached(&vocab, || {
            if p.is_dir() {
                gpt2_from_files(&p.join("encoder.json"), &p.join("vocab.bpe"))
            } else if vocab.ends_with(".txt") {
                bert_from_vocab_txt(&p)
            } else {
                from_json(&p)
            }
        })
        .with_context(|| format!("case {}: vocab path {vocab}", case.id))?;
        let family = if p.is_dir() { Family::ByteLevel } else { Family::Other };
        return Ok(Loaded { tok, family, known_ids: None, trained: false });
    }
    bail!("case {}: `vocab` = `{vocab}` is not valid; valid: {VOCAB_NAMES}", case.id)
}

/// The family of a `KIND-trained` vocabulary; `None` for an unknown kind.
fn trained_family(kind: &str) -> Option<Family> {
    match kind {
        "gpt2" => Some(Family::ByteLevel),
        "bert" => Some(Family::WordPiece),
        "llama2" | "unigram" => Some(Family::SentencePiece),
        _ => None,
    }
}

/// Whether [`tokenizer`] would accept `vocab` (without loading it), in its order:
/// a real vocabulary, a `-trained` one, a path.
pub(crate) fn vocab_is_valid(vocab: &str) -> bool {
    if REAL.iter().any(|(n, _)| *n == vocab) {
        return true;
    }
    match vocab.strip_suffix("-trained") {
        Some(kind) => trained_family(kind).is_some(),
        None => looks_like_path(vocab),
    }
}

/// One tokenizer per key per process: loading a 50k vocabulary or training
/// on the corpus is setup, not something every case should pay for again.
fn cached(key: &str, make: impl FnOnce() -> Result<Tokenizer>) -> Result<Arc<Tokenizer>> {
    static CACHE: Mutex<Option<HashMap<String, Arc<Tokenizer>>>> = Mutex::new(None);
    if let Some(t) = CACHE.lock().ok().and_then(|c| c.as_ref().and_then(|m| m.get(key).cloned())) {
        return Ok(t);
    }
    let t = Arc::new(make()?);
    if let Ok(mut c) = CACHE.lock() {
        c.get_or_insert_with(HashMap::new).insert(key.to_string(), t.clone());
    }
    Ok(t)
}

fn tk<T>(r: tokenizers::Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{e}"))
}

/// A tokenizer.json as a user would load it, minus any padding or
/// truncation it carries (the `special_tokens` benchmark sets its own).
fn from_json(path: &Path) -> Result<Tokenizer> {
    let mut t = tk(Tokenizer::from_file(path)).with_context(|| format!("loading {}", path.display()))?;
    t.with_padding(None);
    tk(t.with_truncation(None))?;
    Ok(t)
}

/// GPT-2 as OpenAI ships it: encoder.json (= vocab.json) and vocab.bpe
/// (= merges.txt), byte-level pre-tokenizer without a prefix space and the
/// byte-level decoder; no post-processor, so offsets cover the leading space.
pub(crate) fn gpt2_from_files(encoder: &Path, merges: &Path) -> Result<Tokenizer> {
    let (e, m) = (encoder.display().to_string(), merges.display().to_string());
    let bpe = tk(BPE::from_file(&e, &m).build()).with_context(|| format!("loading {e} + {m}"))?;
    let mut t = Tokenizer::new(bpe);
    t.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
    t.with_decoder(Some(ByteLevel::default()));
    Ok(t)
}

/// A BERT (uncased) tokenizer from a bare vocab.txt, as `BertTokenizerFast` builds it.
fn bert_from_vocab_txt(path: &Path) -> Result<Tokenizer> {
    let wp = tk(WordPiece::from_file(&path.display().to_string()).unk_token("[UNK]".into()).build())?;
    let (cls, sep) = (wp.token_to_id_str("[CLS]"), wp.token_to_id_str("[SEP]"));
    let mut t = Tokenizer::new(wp);
    tk(t.with_normalizer(Some(BertNormalizer::default())))?;
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    if let (Some(c), Some(s)) = (cls, sep) {
        t.with_post_processor(Some(BertProcessing::new(("[SEP]".into(), s), ("[CLS]".into(), c))));
    }
    t.with_decoder(Some(tokenizers::decoders::wordpiece::WordPiece::default()));
    Ok(t)
}

trait TokenToId {
    fn token_to_id_str(&self, t: &str) -> Option<u32>;
}
impl TokenToId for WordPiece {
    fn token_to_id_str(&self, t: &str) -> Option<u32> {
        use tokenizers::Model;
        self.token_to_id(t)
    }
}

/// Corpus bytes the `-trained` vocabularies learn from.
pub(crate) const FALLBACK_TRAIN_BYTES: usize = 1 << 20;

/// Vocabulary sizes of the real files the fallbacks stand in for.
pub(crate) fn fallback_vocab_size(kind: &str) -> usize {
    match kind {
        "gpt2" => 50257,
        "bert" => 30522,
        "llama2" => 32000,
        _ => 8000,
    }
}

/// A tokenizer of the same kind as the real `kind`, trained on the first
/// [`FALLBACK_TRAIN_BYTES`] of `text` at the real vocabulary's size (`unigram`: SentencePiece's default 8000).
pub(crate) fn train_like(kind: &str, text: &str) -> Result<Tokenizer> {
    // The first MiB of lines: enough for the KJV's vocabulary, and it keeps
    // this setup to seconds (the Unigram trainer is the slow one).
    let mut total = 0usize;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take_while(|l| {
            total += l.len();
            total <= FALLBACK_TRAIN_BYTES + l.len()
        })
        .collect();
    train_model(kind, fallback_vocab_size(kind), &lines)
}

/// Trains `kind` (`gpt2`/`bpe`, `bert`/`wordpiece`, `llama2`, `unigram`) at `vocab_size` on `lines`.
pub(crate) fn train_model(kind: &str, vocab_size: usize, lines: &[&str]) -> Result<Tokenizer> {
    type Raw = TokenizerImpl<
        ModelWrapper,
        tokenizers::NormalizerWrapper,
        tokenizers::PreTokenizerWrapper,
        tokenizers::PostProcessorWrapper,
        tokenizers::DecoderWrapper,
    >;
    let special = |names: &[&str]| names.iter().map(|n| AddedToken::from(*n, true)).collect::<Vec<_>>();
    let metaspace = || Metaspace::new('▁', PrependScheme::Always, true);
    let (mut t, mut trainer): (Raw, TrainerWrapper) = match kind {
        "gpt2" | "bpe" => {
            let mut t = Raw::new(ModelWrapper::BPE(BPE::default()));
            t.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
            t.with_decoder(Some(ByteLevel::default()));
            let trainer = BpeTrainerBuilder::new()
                .vocab_size(vocab_size)
                .show_progress(false)
                .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
                .special_tokens(special(&["<|endoftext|>"]))
                .build();
            (t, trainer.into())
        }
        "bert" | "wordpiece" => {
            let mut t = Raw::new(ModelWrapper::WordPiece(WordPiece::default()));
            tk(t.with_normalizer(Some(BertNormalizer::default())))?;
            t.with_pre_tokenizer(Some(BertPreTokenizer));
            t.with_decoder(Some(tokenizers::decoders::wordpiece::WordPiece::default()));
            let trainer = WordPieceTrainerBuilder::new()
                .vocab_size(vocab_size)
                .show_progress(false)
                .special_tokens(special(&["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
                .build();
            (t, trainer.into())
        }
        "llama2" => {
            let mut t = Raw::new(ModelWrapper::BPE(BPE::default()));
            t.with_pre_tokenizer(Some(metaspace()));
            t.with_decoder(Some(metaspace()));
            let trainer = BpeTrainerBuilder::new()
                .vocab_size(vocab_size)
                .show_progress(false)
                .special_tokens(special(&["<unk>", "<s>", "</s>"]))
                .build();
            (t, trainer.into())
        }
        "unigram" => {
            let mut t = Raw::new(ModelWrapper::Unigram(Unigram::default()));
            // SentencePiece's nmt_nfkc: control characters dropped, newlines
            // and other whitespace to a space, then NFKC.
            tk(t.with_normalizer(Some(Sequence::new(vec![Nmt.into(), NFKC.into()]))))?;
            t.with_pre_tokenizer(Some(metaspace()));
            t.with_decoder(Some(metaspace()));
            let trainer = UnigramTrainer::builder()
                .vocab_size(vocab_size as u32)
                .show_progress(false)
                .unk_token(Some("<unk>".into()))
                .special_tokens(special(&["<unk>", "<s>", "</s>"]))
                .build()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            (t, trainer.into())
        }
        other => bail!("cannot train `{other}`; valid: bpe, wordpiece, unigram"),
    };
    tk(t.train(&mut trainer, lines.iter()))?;
    let mut t: Tokenizer = t.into();
    match kind {
        "bert" | "wordpiece" => {
            if let (Some(c), Some(s)) = (t.token_to_id("[CLS]"), t.token_to_id("[SEP]")) {
                t.with_post_processor(Some(BertProcessing::new(("[SEP]".into(), s), ("[CLS]".into(), c))));
            }
        }
        "llama2" | "unigram" => {
            if let Some(bos) = t.token_to_id("<s>") {
                let tp = TemplateProcessing::builder()
                    .try_single("<s> $A")
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .special_tokens(vec![("<s>", bos)])
                    .build()?;
                t.with_post_processor(Some(tp));
            }
        }
        _ => {}
    }
    Ok(t)
}
