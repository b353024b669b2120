//! Encode, batch encode, decode, offsets and special-token handling: the
//! timed calls are the `tokenizers` API a user calls, on texts cut from the
//! corpus at prepare time.

use super::reference;
use super::sources::{self, Family, Loaded};
use crate::backend::cpu::Context;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;
use tokenizers::{Encoding, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

fn tk<T>(r: tokenizers::Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{e}"))
}

/// What one iteration does with the texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `encode(text, false)` for each text in turn, recording each latency.
    Single,
    /// One `encode_batch_char_offsets(texts, false)` call (what Python's
    /// `encode_batch` runs), on the case's pool.
    Batch,
    /// `decode(ids, false)` for each text's ids.
    Decode,
    /// `encode_fast` (no offsets), `encode` (byte offsets) or `encode_char_offsets`.
    Offsets(Offsets),
    /// `encode_batch(texts, true)` with truncation and fixed padding.
    Special,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offsets {
    None,
    Bytes,
    Chars,
}

struct EncodeWork {
    loaded: Loaded,
    /// The tokenizer the timed calls use (a clone with truncation and padding for `Special`).
    tok: Arc<Tokenizer>,
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    mode: Mode,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    bytes: f64,
    tokens: f64,
    /// Per-text latencies (ns) of `Single` iterations, capped.
    latencies: Vec<f64>,
    extra: Vec<Metric>,
}

const MAX_LATENCIES: usize = 1 << 20;

fn build(case: &Case, ctx: &Context, mode: Mode) -> Result<Box<dyn Workload>> {
    let loaded = sources::tokenizer(case)?;
    let texts = sources::case_texts(case)?;
    let pool = ctx.pool();
    let mut tok = loaded.tok.clone();
    if mode == Mode::Special {
        let max_length = case.usize("max_length")?;
        if max_length < 8 {
            bail!("case {}: `max_length` must be at least 8", case.id);
        }
        let mut t = (*tok).clone();
        let pad_id = t.token_to_id("[PAD]").or_else(|| t.token_to_id("<unk>")).unwrap_or(0);
        let pad_token = t.id_to_token(pad_id).unwrap_or_default();
        tk(t.with_truncation(Some(TruncationParams { max_length, ..Default::default() })))?;
        t.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(max_length),
            pad_id,
            pad_token,
            ..Default::default()
        }));
        tok = Arc::new(t);
    }
    let plain = install_batch(&pool, &loaded.tok, &texts, false)?;
    let ids: Vec<Vec<u32>> = plain.iter().map(|e| e.get_ids().to_vec()).collect();
    let bytes = texts.iter().map(String::len).sum::<usize>() as f64;
    let tokens = match mode {
        Mode::Special => (texts.len() * case.usize("max_length")?) as f64,
        _ => ids.iter().map(Vec::len).sum::<usize>() as f64,
    };
    let mut extra = vec![
        Metric::new("texts", texts.len() as f64, "texts"),
        Metric::new(
            "bytes_per_token",
            bytes / ids.iter().map(Vec::len).sum::<usize>().max(1) as f64,
            "B/token",
        ),
        Metric::new("vocab_size", loaded.tok.get_vocab_size(true) as f64, "tokens"),
    ];
    if let Some(unk) = loaded.tok.token_to_id("[UNK]").or_else(|| loaded.tok.token_to_id("<unk>")) {
        let n = ids.iter().flatten().filter(|&&i| i == unk).count();
        extra.push(Metric::new("unk_rate", n as f64 / tokens.max(1.0), "fraction"));
    }
    Ok(Box::new(EncodeWork {
        loaded,
        tok,
        texts,
        ids,
        mode,
        pool,
        bytes,
        tokens,
        latencies: Vec::new(),
        extra,
    }))
}

fn install_batch(
    pool: &Option<std::sync::Arc<rayon::ThreadPool>>,
    tok: &Tokenizer,
    texts: &[String],
    specials: bool,
) -> Result<Vec<Encoding>> {
    let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
    super::install(pool.as_deref(), || tk(tok.encode_batch_char_offsets(inputs, specials)))
}

/// `encode`: single texts, one at a time.
pub(crate) fn prepare_encode(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    build(case, ctx, Mode::Single)
}

/// `encode_batch`: the whole batch in one call, 1 or all threads.
pub(crate) fn prepare_batch(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    build(case, ctx, Mode::Batch)
}

/// `decode`: every text's ids back to a string.
pub(crate) fn prepare_decode(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    build(case, ctx, Mode::Decode)
}

/// Valid `offsets` values.
pub(super) const OFFSETS: &[&str] = &["none", "bytes", "chars"];

/// `offsets`: encode without offsets, with byte or with char offsets.
pub(crate) fn prepare_offsets(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let o = match super::choice(case, "offsets", OFFSETS)? {
        "none" => Offsets::None,
        "bytes" => Offsets::Bytes,
        _ => Offsets::Chars,
    };
    build(case, ctx, Mode::Offsets(o))
}

/// `special_tokens`: add specials, truncate and pad to `max_length`.
pub(crate) fn prepare_special(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    build(case, ctx, Mode::Special)
}

fn fail(reference: &str, detail: String) -> Result<()> {
    Verification { passed: false, reference: reference.into(), max_error: None, detail }
        .into_result()
        .map(drop)
}

impl EncodeWork {
    fn encode_one(&self, text: &str, o: Offsets) -> Result<Encoding> {
        tk(match o {
            Offsets::None => self.tok.encode_fast(text, false),
            Offsets::Bytes => self.tok.encode(text, false),
            Offsets::Chars => self.tok.encode_char_offsets(text, false),
        })
    }

    /// Checks of the tokenizer itself: known ids for real vocabularies, the
    /// exact round trip for byte-level BPE.
    fn verify_tokenizer(&self, checks: &mut Vec<String>) -> Result<()> {
        if let Some(v) = reference::known_ids(&self.loaded)? {
            checks.push(v.into_result()?.reference);
        }
        if self.loaded.family == Family::ByteLevel {
            checks.push(reference::round_trip(&self.tok, &self.texts)?.into_result()?.reference);
        }
        Ok(())
    }

    fn verify_mode(&mut self, checks: &mut Vec<String>) -> Result<()> {
        match self.mode {
            Mode::Single => {
                for (t, want) in self.texts.iter().zip(&self.ids) {
                    let got = self.encode_one(t, Offsets::Bytes)?;
                    if got.get_ids() != want.as_slice() {
                        return fail("single encode == batch encode", format!("{t:?}"));
                    }
                }
                checks.push("single encodes equal the batch encode".into());
            }
            Mode::Batch => {
                let got = install_batch(&self.pool, &self.tok, &self.texts, false)?;
                for (t, e) in self.texts.iter().zip(&got) {
                    let single = self.encode_one(t, Offsets::Chars)?;
                    if e.get_ids() != single.get_ids()
                        || e.get_offsets() != single.get_offsets()
                        || e.get_tokens() != single.get_tokens()
                    {
                        return fail("batch encode == concatenation of single encodes", format!("{t:?}"));
                    }
                }
                checks.push(format!("batch == {} single encodes (ids, tokens, char offsets)", got.len()));
            }
            Mode::Decode => self.verify_decode(checks)?,
            Mode::Offsets(o) => self.verify_offsets(o, checks)?,
            Mode::Special => self.verify_special(checks)?,
        }
        Ok(())
    }

    /// `decode`: lossy decoders must still give text that encodes back to
    /// the same ids (byte-level ones are checked exactly by the round trip).
    fn verify_decode(&mut self, checks: &mut Vec<String>) -> Result<()> {
        match self.loaded.family {
            Family::ByteLevel => {} // the round trip above checks decode exactly
            _ => {
                // Lossy decoders (lowercasing, accent stripping, spacing)
                // must still give text that encodes back to the same ids.
                let mut bad = 0usize;
                let mut first = None;
                for (t, ids) in self.texts.iter().zip(&self.ids) {
                    let back = tk(self.tok.decode(ids, false))?;
                    let again = self.encode_one(&back, Offsets::Bytes)?;
                    // SentencePiece decoders strip one leading space, so
                    // " x" comes back as "x": then the decoded text must
                    // be the normalized text (see sentencepiece_expected).
                    let sp_ok = self.loaded.family == Family::SentencePiece
                        && back == reference::sentencepiece_expected(&self.loaded.tok, t)?;
                    if again.get_ids() != ids.as_slice() && !sp_ok {
                        bad += 1;
                        first.get_or_insert((t.clone(), back));
                    }
                }
                if let Some((t, back)) = first {
                    return fail(
                        "encode(decode(ids)) == ids",
                        format!(
                            "{bad} of {} texts differ; first {t:?} decoded to {back:?}",
                            self.texts.len()
                        ),
                    );
                }
                checks.push(format!(
                    "encode(decode(ids)) == ids (SentencePiece: or decode == normalized text) on {} texts",
                    self.texts.len()
                ));
            }
        }
        Ok(())
    }

    /// `offsets`: the same ids with and without offsets, offsets within the
    /// text, byte-level tokens spelling theirs, char offsets converted.
    fn verify_offsets(&mut self, o: Offsets, checks: &mut Vec<String>) -> Result<()> {
        let table = reference::byte_to_unicode();
        for (t, want) in self.texts.iter().zip(&self.ids) {
            let got = self.encode_one(t, o)?;
            if got.get_ids() != want.as_slice() {
                return fail("ids equal with and without offsets", format!("{t:?}"));
            }
            if o == Offsets::None {
                continue;
            }
            let bytes = self.encode_one(t, Offsets::Bytes)?;
            if self.loaded.family == Family::ByteLevel
                && let Err(e) =
                    reference::check_byte_level_offsets(t, bytes.get_tokens(), bytes.get_offsets(), &table)
            {
                return fail("byte-level tokens spell their offsets", e);
            }
            if bytes.get_offsets().iter().any(|&(s, e)| s > e || e > t.len()) {
                return fail("offsets within the text", format!("{t:?}"));
            }
            if o == Offsets::Chars {
                let want = reference::bytes_to_char_offsets(t, bytes.get_offsets());
                if got.get_offsets() != want.as_slice() {
                    return fail("char offsets == byte offsets converted by char_indices", format!("{t:?}"));
                }
            }
        }
        checks.push(format!("offsets ({o:?}) checked on {} texts", self.texts.len()));
        Ok(())
    }

    /// `special_tokens`: specials, truncation and padding built by hand from
    /// the plain ids.
    fn verify_special(&mut self, checks: &mut Vec<String>) -> Result<()> {
        let (prefix, suffix) = self.special_frame()?;
        let max = self.tok.get_padding().map_or(0, |p| match p.strategy {
            PaddingStrategy::Fixed(n) => n,
            PaddingStrategy::BatchLongest => 0,
        });
        let pad = self.tok.get_padding().map_or(0, |p| p.pad_id);
        let got = install_batch(&self.pool, &self.tok, &self.texts, true)?;
        let mut truncated = 0usize;
        for (e, plain) in got.iter().zip(&self.ids) {
            let room = max - prefix.len() - suffix.len();
            let keep = plain.len().min(room);
            truncated += usize::from(plain.len() > room);
            let mut want: Vec<u32> = prefix.clone();
            want.extend_from_slice(&plain[..keep]);
            want.extend_from_slice(&suffix);
            let real = want.len();
            want.resize(max, pad);
            let mask_ok = e.get_attention_mask().iter().enumerate().all(|(i, &m)| (m == 1) == (i < real));
            if e.get_ids() != want.as_slice() || !mask_ok {
                return fail(
                    "specials + truncation + padding built by hand from the plain ids",
                    format!("got {:?}, want {:?}", e.get_ids(), want),
                );
            }
        }
        self.extra.push(Metric::new(
            "truncated_fraction",
            truncated as f64 / got.len().max(1) as f64,
            "fraction",
        ));
        checks.push(format!("{} encodings == specials + plain ids truncated/padded to {max}", got.len()));
        Ok(())
    }

    /// The special tokens around a single sequence, by family: BERT's
    /// [CLS] ... [SEP], SentencePiece's <s> ...
    fn special_frame(&self) -> Result<(Vec<u32>, Vec<u32>)> {
        let t = &self.tok;
        match self.loaded.family {
            Family::WordPiece => match (t.token_to_id("[CLS]"), t.token_to_id("[SEP]")) {
                (Some(c), Some(s)) => Ok((vec![c], vec![s])),
                _ => bail!("WordPiece vocabulary without [CLS]/[SEP]"),
            },
            Family::SentencePiece => match t.token_to_id("<s>") {
                Some(b) => Ok((vec![b], vec![])),
                None => bail!("SentencePiece vocabulary without <s>"),
            },
            _ => bail!(
                "special_tokens supports WordPiece (bert) and SentencePiece (llama2, unigram-trained) vocabularies; \
                 byte-level GPT-2 adds no special tokens"
            ),
        }
    }
}

impl Workload for EncodeWork {
    fn verify(&mut self) -> Result<Verification> {
        let mut checks = Vec::new();
        self.verify_tokenizer(&mut checks)?;
        self.verify_mode(&mut checks)?;
        let mut v = Verification::pass(checks.join("; "));
        v.detail = format!("{} texts, {} bytes, {} tokens", self.texts.len(), self.bytes, self.tokens);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![
            Throughput::bytes(self.bytes),
            Throughput::tokens(self.tokens),
            Throughput::items(self.texts.len() as f64),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            match self.mode {
                Mode::Single => {
                    let record = self.latencies.len() < MAX_LATENCIES;
                    for t in &self.texts {
                        let start = Instant::now();
                        black_box(tk(self.tok.encode(black_box(t.as_str()), false))?);
                        if record {
                            self.latencies.push(start.elapsed().as_nanos() as f64);
                        }
                    }
                }
                Mode::Batch => {
                    black_box(install_batch(&self.pool, &self.tok, &self.texts, false)?);
                }
                Mode::Decode => {
                    for ids in &self.ids {
                        black_box(tk(self.tok.decode(black_box(ids), false))?);
                    }
                }
                Mode::Offsets(o) => {
                    for t in &self.texts {
                        black_box(self.encode_one(black_box(t), o)?);
                    }
                }
                Mode::Special => {
                    black_box(install_batch(&self.pool, &self.tok, &self.texts, true)?);
                }
            }
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = self.extra.clone();
        if !self.latencies.is_empty() {
            let mut l = std::mem::take(&mut self.latencies);
            l.sort_by(f64::total_cmp);
            let q = |p: f64| l[((l.len() - 1) as f64 * p).round() as usize];
            m.push(Metric::new("latency_p50", q(0.5), "ns"));
            m.push(Metric::new("latency_p99", q(0.99), "ns"));
            m.push(Metric::new("latency_max", q(1.0), "ns"));
        }
        if self.loaded.trained {
            m.push(Metric::new("trained_here", 1.0, "bool"));
        }
        m
    }
}
