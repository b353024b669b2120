//! Normalization and pre-tokenization alone: the first two stages of every
//! encode, timed without the model so their share of the cost is visible.

use super::reference;
use super::sources::{self, Length};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Context, Result, bail};
use std::hint::black_box;
use tokenizers::normalizers::{BertNormalizer, Lowercase, NFC, NFD, NFKC, Sequence, StripAccents};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{
    NormalizedString, Normalizer, NormalizerWrapper, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, PreTokenizerWrapper,
};

fn tk<T>(r: tokenizers::Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{e}"))
}

/// The texts of a `normalize`/`pretokenize` case: its corpus in paragraphs.
fn texts(case: &Case) -> Result<Vec<String>> {
    let text = sources::corpus(case)?;
    let t = sources::segments(&text, Length::Paragraph, case.usize("input_bytes")?);
    if t.is_empty() {
        bail!("case {}: the corpus has no non-empty line", case.id);
    }
    Ok(t)
}

struct Normalize {
    form: &'static str,
    norm: NormalizerWrapper,
    texts: Vec<String>,
    bytes: f64,
    out_bytes: f64,
}

/// Normalizer of each `form`, as the tokenizers of the real vocabularies use them.
fn normalizer(form: &str) -> NormalizerWrapper {
    match form {
        "nfc" => NFC.into(),
        "nfkc" => NFKC.into(),
        "lowercase" => Lowercase.into(),
        "strip_accents" => Sequence::new(vec![NFD.into(), StripAccents.into()]).into(),
        _ => BertNormalizer::default().into(),
    }
}

/// Valid `form` values of `normalize`.
pub(super) const FORMS: &[&str] = &["nfc", "nfkc", "lowercase", "strip_accents", "bert"];

/// `normalize`: one normalizer over every paragraph of the corpus.
pub(crate) fn prepare_normalize(case: &Case) -> Result<Box<dyn Workload>> {
    let form = super::choice(case, "form", FORMS)?;
    let texts = texts(case)?;
    let norm = normalizer(form);
    let mut out_bytes = 0usize;
    for t in &texts {
        let mut n = NormalizedString::from(t.as_str());
        tk(norm.normalize(&mut n))?;
        out_bytes += n.get().len();
    }
    let bytes = texts.iter().map(String::len).sum::<usize>() as f64;
    Ok(Box::new(Normalize { form, norm, texts, bytes, out_bytes: out_bytes as f64 }))
}

fn apply(norm: &NormalizerWrapper, s: &str) -> Result<String> {
    let mut n = NormalizedString::from(s);
    tk(norm.normalize(&mut n))?;
    Ok(n.get().to_string())
}

/// Reference for ASCII text, where every form has a plain definition:
/// NFC/NFKC/accent stripping change nothing, lowercase is ASCII lowercase,
/// BERT drops control characters and turns whitespace into spaces.
fn ascii_reference(form: &str, s: &str) -> String {
    match form {
        "lowercase" => s.to_ascii_lowercase(),
        "bert" => s
            .chars()
            .filter(|c| !c.is_ascii_control() || matches!(c, '\t' | '\n' | '\r'))
            .map(|c| if c.is_ascii_whitespace() || c == '\u{b}' { ' ' } else { c.to_ascii_lowercase() })
            .collect(),
        _ => s.to_string(),
    }
}

impl Workload for Normalize {
    fn verify(&mut self) -> Result<Verification> {
        // Known values: the multilingual sample against Python's unicodedata.
        let v: serde_json::Value =
            serde_json::from_str(reference::NORMALIZED).context("normalized fixture")?;
        let want = v[self.form].as_str().context("normalized fixture form")?;
        let got = apply(&self.norm, sources::MULTILINGUAL)?;
        if got != want {
            let at = got.chars().zip(want.chars()).position(|(a, b)| a != b).unwrap_or(0);
            let ctx = |s: &str| s.chars().skip(at.saturating_sub(10)).take(30).collect::<String>();
            return Verification {
                passed: false,
                reference: "Python unicodedata on the multilingual sample".into(),
                max_error: None,
                detail: format!("first difference at char {at}: got {:?}, want {:?}", ctx(&got), ctx(want)),
            }
            .into_result();
        }
        // The timed texts: exact reference when ASCII, else idempotence
        // (normalizing the output again changes nothing).
        let mut ascii = 0usize;
        for t in &self.texts {
            let out = apply(&self.norm, t)?;
            let ok = if t.is_ascii() {
                ascii += 1;
                out == ascii_reference(self.form, t)
            } else {
                self.form == "bert" || apply(&self.norm, &out)? == out
            };
            if !ok {
                bail!("normalize {}: {t:?} gave {out:?}", self.form);
            }
        }
        let mut v = Verification::pass(format!(
            "Python unicodedata on the multilingual sample ({}); ASCII reference on {ascii} texts, idempotence on {}",
            v["generated_by"].as_str().unwrap_or(""),
            self.texts.len() - ascii
        ));
        v.detail = format!("{} texts, {} bytes", self.texts.len(), self.bytes);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::bytes(self.bytes), Throughput::items(self.texts.len() as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            for t in &self.texts {
                let mut n = NormalizedString::from(black_box(t.as_str()));
                tk(self.norm.normalize(&mut n))?;
                black_box(&n);
            }
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        vec![Metric::new("output_input_ratio", self.out_bytes / self.bytes.max(1.0), "B/B")]
    }
}

struct PreTokenize {
    kind: &'static str,
    pre: PreTokenizerWrapper,
    texts: Vec<String>,
    bytes: f64,
    pieces: f64,
}

/// Valid `kind` values of `pretokenize`.
pub(super) const KINDS: &[&str] = &["bytelevel", "whitespace", "metaspace"];

/// `pretokenize`: one pre-tokenizer over every paragraph of the corpus.
pub(crate) fn prepare_pretokenize(case: &Case) -> Result<Box<dyn Workload>> {
    let kind = super::choice(case, "kind", KINDS)?;
    let pre: PreTokenizerWrapper = match kind {
        "bytelevel" => ByteLevel::new(false, false, true).into(),
        "whitespace" => WhitespaceSplit.into(),
        _ => Metaspace::new('▁', PrependScheme::Always, true).into(),
    };
    let texts = texts(case)?;
    let mut w = PreTokenize { kind, pre, texts, bytes: 0.0, pieces: 0.0 };
    w.bytes = w.texts.iter().map(String::len).sum::<usize>() as f64;
    let mut pieces = 0usize;
    for t in &w.texts {
        pieces += w.splits(t)?.len();
    }
    w.pieces = pieces as f64;
    Ok(Box::new(w))
}

impl PreTokenize {
    fn splits(&self, t: &str) -> Result<Vec<(String, (usize, usize))>> {
        let mut p = PreTokenizedString::from(t);
        tk(self.pre.pre_tokenize(&mut p))?;
        Ok(p.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(s, o, _)| (s.to_string(), o))
            .collect())
    }

    /// The independent split of `t`: GPT-2's regex on the `regex` crate,
    /// `split_whitespace`, or SentencePiece's metaspace rule by hand.
    fn reference(&self, t: &str, table: &[char; 256]) -> Vec<(String, (usize, usize))> {
        match self.kind {
            "bytelevel" => reference::gpt2_split(t)
                .into_iter()
                .map(|(s, e)| (reference::byte_level(&t.as_bytes()[s..e], table), (s, e)))
                .collect(),
            "whitespace" => t
                .split_whitespace()
                .map(|w| {
                    let s = w.as_ptr() as usize - t.as_ptr() as usize;
                    (w.to_string(), (s, s + w.len()))
                })
                .collect(),
            _ => {
                // Spaces become "▁", a "▁" is prepended (spanning the first
                // character's bytes... of nothing: 0..0) unless the text starts
                // with a space, and a piece starts at every "▁".
                let mut chars: Vec<(char, usize, usize)> = Vec::new();
                if !t.starts_with(' ') {
                    chars.push(('▁', 0, 0));
                }
                chars.extend(
                    t.char_indices().map(|(i, c)| (if c == ' ' { '▁' } else { c }, i, i + c.len_utf8())),
                );
                let mut out: Vec<(String, (usize, usize))> = Vec::new();
                for (c, s, e) in chars {
                    match out.last_mut() {
                        Some((piece, span)) if c != '▁' => {
                            piece.push(c);
                            span.1 = e;
                        }
                        _ => out.push((c.to_string(), (s, e))),
                    }
                }
                out
            }
        }
    }
}

impl Workload for PreTokenize {
    fn verify(&mut self) -> Result<Verification> {
        let table = reference::byte_to_unicode();
        let mut all: Vec<&str> = self.texts.iter().map(String::as_str).collect();
        all.push(sources::MULTILINGUAL);
        for t in all {
            let got = self.splits(t)?;
            let want = self.reference(t, &table);
            if got != want {
                let i = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                return Verification {
                    passed: false,
                    reference: format!("independent {} splitter", self.kind),
                    max_error: None,
                    detail: format!(
                        "piece {i}: got {:?}, want {:?} ({} vs {} pieces)",
                        got.get(i),
                        want.get(i),
                        got.len(),
                        want.len()
                    ),
                }
                .into_result();
            }
        }
        let what = match self.kind {
            "bytelevel" => "GPT-2 regex on the regex crate (look-ahead emulated) + byte-to-unicode table",
            "whitespace" => "str::split_whitespace",
            _ => "metaspace rule by hand (prepend ▁, spaces to ▁, cut before ▁)",
        };
        let mut v =
            Verification::pass(format!("{what}, pieces and byte offsets, corpus + multilingual sample"));
        v.detail = format!("{} texts, {} bytes, {} pieces", self.texts.len(), self.bytes, self.pieces);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::bytes(self.bytes), Throughput::items(self.pieces)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            for t in &self.texts {
                let mut p = PreTokenizedString::from(black_box(t.as_str()));
                tk(self.pre.pre_tokenize(&mut p))?;
                black_box(&p);
            }
        }
        Ok(())
    }
}
