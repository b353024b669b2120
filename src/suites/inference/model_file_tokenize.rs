//! The `gguf` benchmark's tokenizer side: the `tokenize` case (the file's own
//! tokenizer, `crate::model::tokenizer`, timed on its own and never inside
//! prefill) and the real-text prompts of the `pp`/`tg`/`pg` cases.
//!
//! The tokenizer is a GGUF file's (`tokenizer.ggml.*`) or a Hugging Face
//! directory's `tokenizer.json` (through the `tokenizers` crate as it is).
//!
//! Verified before timing: the round trip (decode of encode gives the text
//! back, byte for byte) of a check text full of edge cases and of the timed
//! text (for WordPiece, which lowercases and drops whitespace, the timed
//! text's letters back, ignoring case and whitespace), and, when the
//! vocabulary is one with a committed reference, the check text's ids equal
//! the reference's: llama.cpp's for a GGUF file (`llama-tokenize` of build
//! 0c1e570, made by `scripts/gguf_tokens_reference.py`), the Python
//! `tokenizers` library's for a `tokenizer.json`
//! (`scripts/hf_tokens_reference.py`).

use crate::model::gguf::{GgufFile, Header};
use crate::model::source::Source;
use crate::model::source::gguf::FileInfo;
use crate::model::tokenizer::{self, FileTokenizer};
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};

/// Edge cases: contractions, digits, runs of spaces, tabs, blank lines,
/// code, backslashes, accents, Greek, Cyrillic, CJK, Korean, emoji, text
/// control tokens written out (`<|im_start|>`), trailing spaces, no final newline.
pub const CHECK_TEXT: &str = include_str!("text/check.txt");
/// Genesis 1-3 of the King James Bible (public domain): the timed text and
/// the source of the prompts.
pub const PROMPT_TEXT: &str = include_str!("text/genesis.txt");
/// Reference ids of [`CHECK_TEXT`], one file per vocabulary: llama.cpp's
/// for GGUF files, the `tokenizers` library's for `tokenizer.json` files
/// (the test directories' 512-token BPE of `scripts/make_arch_models.py`,
/// and the MiniLM directory's WordPiece).
const REFERENCES: &[&str] = &[
    include_str!("text/smollm2_tokens.json"),
    include_str!("text/llama_spm_tokens.json"),
    include_str!("text/bert_bge_tokens.json"),
    include_str!("text/bpe512_tokens.json"),
    include_str!("text/minilm_hf_tokens.json"),
];

/// FNV-1a (64 bits) over `chunks`, each followed by a zero byte.
fn fnv1a<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in chunks {
        for &c in b.iter().chain(&[0u8]) {
            x ^= u64::from(c);
            x = x.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{x:016x}")
}

/// FNV-1a over the vocabulary's tokens then its merges, each followed by a
/// zero byte: which committed reference applies to a file.
pub fn fingerprint(h: &Header) -> String {
    let strings = ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]
        .into_iter()
        .flat_map(|key| h.get(key).and_then(|v| v.as_array()).unwrap_or(&[]))
        .map(|v| v.as_str().unwrap_or("").as_bytes());
    fnv1a(strings)
}

/// The same for a `tokenizer.json`: FNV-1a over the file's bytes then a
/// zero byte (a reference applies to exactly the file it was made from).
pub fn fingerprint_json(bytes: &[u8]) -> String {
    fnv1a([bytes])
}

/// The committed reference ids of [`CHECK_TEXT`] for `fp`, with where they came from.
fn reference(fp: &str) -> Result<Option<(Vec<u32>, String)>> {
    for r in REFERENCES {
        let j: serde_json::Value = serde_json::from_str(r)?;
        if j["fingerprint"].as_str() != Some(fp) {
            continue;
        }
        let ids = j["ids"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_u64().map(|x| x as u32)).collect())
            .unwrap_or_default();
        return Ok(Some((ids, j["source"].as_str().unwrap_or("?").to_string())));
    }
    Ok(None)
}

/// The checks of the module doc.
pub fn verify(t: &FileTokenizer, fp: &str) -> Result<Verification> {
    for (what, text) in [("check text", CHECK_TEXT), ("Genesis 1-3", PROMPT_TEXT)] {
        let ids = t.encode(text)?;
        let back = t.decode(&ids)?;
        if !t.round_trips() {
            // WordPiece: only the plain English text must come back, as
            // letters and punctuation (an [UNK] or a lost word fails).
            let squash = |s: &str| s.split_whitespace().collect::<String>().to_lowercase();
            if text == PROMPT_TEXT && squash(&back) != squash(text) {
                bail!("tokenizer round trip of the {what} loses text (ignoring case and whitespace)");
            }
            continue;
        }
        if back != text {
            let at = back
                .bytes()
                .zip(text.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(back.len().min(text.len()));
            bail!("tokenizer round trip of the {what} differs from byte {at} on ({} ids)", ids.len());
        }
    }
    let got = t.encode(CHECK_TEXT)?;
    Ok(match reference(fp)? {
        Some((want, source)) => {
            let who =
                if source.starts_with("llama.cpp") { "llama.cpp's" } else { "the tokenizers library's" };
            let mut v = Verification::equal(format!("ids of the check text from {source}"), &got, &want);
            if !v.passed {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                v.detail = format!(
                    "ids differ from {who} at index {at} of {} (got {:?}, want {:?})",
                    want.len(),
                    &got[at..(at + 4).min(got.len())],
                    &want[at..(at + 4).min(want.len())]
                );
                return v.into_result();
            }
            let trip = if t.round_trips() { "exact" } else { "of the prompt text's words" };
            v.detail = format!("{} ids equal {who}; round trips {trip}", got.len());
            v
        }
        None => Verification::pass(format!(
            "round trips {} ({} ids for the check text); no committed reference ids for this vocabulary (fingerprint {fp})",
            if t.round_trips() { "exact" } else { "of the prompt text's words" },
            got.len()
        )),
    })
}

/// `n` prompt ids: [`PROMPT_TEXT`] through the file's tokenizer, repeated
/// as often as needed.
pub fn prompt_ids(t: &FileTokenizer, n: usize) -> Result<Vec<u32>> {
    let once = t.encode(PROMPT_TEXT)?;
    if once.is_empty() {
        bail!("the tokenizer gave no ids for the prompt text");
    }
    Ok(once.iter().copied().cycle().take(n).collect())
}

/// `n` prompt ids of a model file: [`PROMPT_TEXT`] through its own
/// tokenizer (a GGUF's `tokenizer.ggml.*`, a directory's `tokenizer.json`),
/// else seeded random ids; the note says which and why.
pub fn prompt(src: &Source, info: &FileInfo, n: usize) -> Result<(Vec<u32>, String)> {
    let d = match src {
        Source::Gguf(f) => return gguf_prompt(f, info, n),
        Source::Hf(d) => d,
    };
    let (ids, note) = match d.tokenizer() {
        Ok(t) => (
            prompt_ids(&FileTokenizer::from_tokenizers(t), n)?,
            "prompt: Genesis 1-3 (KJV) through its tokenizer.json".into(),
        ),
        Err(e) => (
            crate::model::random_ids(n, info.cfg.vocab, 0x9e37),
            format!("prompt: seeded random ids ({e:#})"),
        ),
    };
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= info.cfg.vocab) {
        bail!(
            "{}: tokenizer.json gives id {bad}, outside the model's vocabulary of {}",
            d.dir.display(),
            info.cfg.vocab
        );
    }
    Ok((ids, note))
}

/// [`prompt`] of a GGUF file.
fn gguf_prompt(file: &GgufFile, info: &FileInfo, n: usize) -> Result<(Vec<u32>, String)> {
    let (prompt, note) = match tokenizer::from_header(&file.header) {
        Ok(t) => {
            (prompt_ids(&t, n)?, format!("prompt: Genesis 1-3 (KJV) through the file's {} tokenizer", t.kind))
        }
        Err(e) => (
            crate::model::random_ids(n, info.cfg.vocab, 0x9e37),
            format!("prompt: seeded random ids ({e:#})"),
        ),
    };
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= info.cfg.vocab) {
        bail!(
            "model file {}: the tokenizer gives id {bad}, outside the model's vocabulary of {}",
            file.path.display(),
            info.cfg.vocab
        );
    }
    Ok((prompt, note))
}

/// The `tokenize` case: [`PROMPT_TEXT`] encoded per iteration.
pub struct TokenizeCase {
    ft: FileTokenizer,
    fp: String,
    tokens: usize,
    build_ns: f64,
    /// The file's parameters and tensor bytes, for llama-bench's columns.
    params: u64,
    bytes: u64,
}

/// Builds the file's tokenizer (timed once, reported as `build_ns`).
pub fn prepare(h: &Header) -> Result<Box<dyn Workload>> {
    let t = std::time::Instant::now();
    let ft = tokenizer::from_header(h)?;
    let build_ns = t.elapsed().as_nanos() as f64;
    case(ft, fingerprint(h), build_ns, h.params(), h.data_bytes())
}

/// Builds a Hugging Face directory's tokenizer from its `tokenizer.json`
/// (read and parsed in the timed `build_ns`); `params` and `bytes` are the
/// directory's model's.
pub fn prepare_json(path: &std::path::Path, params: u64, bytes: u64) -> Result<Box<dyn Workload>> {
    let t = std::time::Instant::now();
    let raw = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let tk =
        tokenizers::Tokenizer::from_bytes(&raw).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let ft = FileTokenizer::from_tokenizers(tk);
    let build_ns = t.elapsed().as_nanos() as f64;
    case(ft, fingerprint_json(&raw), build_ns, params, bytes)
}

fn case(ft: FileTokenizer, fp: String, build_ns: f64, params: u64, bytes: u64) -> Result<Box<dyn Workload>> {
    let tokens = ft.encode(PROMPT_TEXT)?.len();
    Ok(Box::new(TokenizeCase { ft, fp, tokens, build_ns, params, bytes }))
}

impl Workload for TokenizeCase {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = verify(&self.ft, &self.fp)?;
        v.detail = format!("{} ({}): {}", self.ft.kind, self.ft.vocab, v.detail);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::tokens(self.tokens as f64), Throughput::bytes(PROMPT_TEXT.len() as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            std::hint::black_box(self.ft.encode(std::hint::black_box(PROMPT_TEXT))?);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        vec![
            Metric::new("vocab", self.ft.vocab as f64, ""),
            Metric::new("text_bytes", PROMPT_TEXT.len() as f64, "B"),
            Metric::new("tokens", self.tokens as f64, ""),
            Metric::new("bytes_per_token", PROMPT_TEXT.len() as f64 / self.tokens as f64, "B"),
            Metric::new("build_ns", self.build_ns, "ns"),
            Metric::new("params", self.params as f64, ""),
            Metric::new("model_bytes", self.bytes as f64, "B"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2's tokenizer from its GGUF file gives llama.cpp's ids for the
    /// check text (the committed reference applies: same fingerprint) and
    /// round-trips; the prompt ids are Genesis's. Skips when the file is absent.
    #[test]
    fn smollm2_tokenizer_matches_llama_cpp() {
        let Ok(path) = crate::data::find(super::super::model_file::SMOLLM2) else {
            eprintln!("skipped: SmolLM2 not in the data folder (bash scripts/fetch-test-data.sh)");
            return;
        };
        let f = crate::model::gguf::GgufFile::open(&path, None).unwrap();
        let ft = tokenizer::from_header(&f.header).unwrap();
        assert_eq!((ft.kind.as_str(), ft.vocab), ("gpt2/smollm", 49152));
        let fp = fingerprint(&f.header);
        assert!(reference(&fp).unwrap().is_some(), "fixture fingerprint {fp}");
        let v = verify(&ft, &fp).unwrap();
        assert!(v.passed && v.detail.contains("equal llama.cpp's"), "{}", v.detail);
        let ids = prompt_ids(&ft, 3000).unwrap();
        assert_eq!(ft.decode(&ids[..4]).unwrap(), "Genesis 1\n\n  ");
        // A wrong id anywhere fails loudly, naming the index.
        let mut j: serde_json::Value = serde_json::from_str(REFERENCES[0]).unwrap();
        j["ids"][5] = serde_json::json!(7);
        let bad: Vec<u32> = j["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_ne!(bad, ft.encode(CHECK_TEXT).unwrap());
    }

    /// llama.cpp's LLaMA SentencePiece and BGE WordPiece vocabularies (its
    /// test files, in the data folder's llama-vocab/) pass the same checks as
    /// SmolLM2's, ids equal to llama.cpp's committed ones.
    #[test]
    fn llama_cpp_spm_and_wpm_vocabularies_match_their_references() {
        for (name, kind, prompt_start) in
            [("llama-spm", "llama/spm", "Genesis 1\n\n  "), ("bert-bge", "bert/wpm", "genesis 1 1 in")]
        {
            let Ok(path) = crate::data::find(&format!("llama-vocab/ggml-vocab-{name}.gguf")) else {
                eprintln!(
                    "skipped: llama.cpp's {name} vocabulary not in the data folder (bash scripts/fetch-test-data.sh)"
                );
                continue;
            };
            let f = crate::model::gguf::GgufFile::open(&path, None).unwrap();
            let ft = tokenizer::from_header(&f.header).unwrap();
            assert_eq!(ft.kind, kind);
            let v = verify(&ft, &fingerprint(&f.header)).unwrap();
            assert!(v.passed && v.detail.contains("equal llama.cpp's"), "{name}: {}", v.detail);
            let ids = prompt_ids(&ft, 100).unwrap();
            assert!(
                ft.decode(&ids[..8]).unwrap().starts_with(prompt_start),
                "{name}: {:?}",
                ft.decode(&ids[..8])
            );
        }
    }

    /// A Hugging Face directory's tokenizer.json: the test directories'
    /// byte-level BPE (exact round trip) and MiniLM's WordPiece give the
    /// Python tokenizers library's ids of the check text (the fixtures of
    /// scripts/hf_tokens_reference.py).
    #[test]
    fn tokenizer_json_files_match_the_tokenizers_library() {
        for (rel, exact) in [("arch/gpt2-tiny-hf/tokenizer.json", true), ("minilm/tokenizer.json", false)] {
            let Ok(path) = crate::data::find(rel) else {
                eprintln!("skipped: {rel} not in the data folder (bash scripts/fetch-test-data.sh)");
                continue;
            };
            let raw = std::fs::read(&path).unwrap();
            let fp = fingerprint_json(&raw);
            let (want, _) = reference(&fp).unwrap().unwrap_or_else(|| panic!("{rel}: no fixture for {fp}"));
            let ft = FileTokenizer::from_tokenizers(tokenizers::Tokenizer::from_bytes(&raw).unwrap());
            assert_eq!(ft.round_trips(), exact, "{rel}");
            let v = verify(&ft, &fp).unwrap();
            assert!(v.passed && v.detail.contains("equal the tokenizers library's"), "{rel}: {}", v.detail);
            assert_eq!(ft.encode(CHECK_TEXT).unwrap(), want, "{rel}");
        }
    }

    /// `TFBENCH_PROBE_MODEL=x.gguf TFBENCH_PROBE_TEXT=t.txt cargo test --release --lib
    /// model_file_tokenize::tests::probe -- --ignored --nocapture` prints the file tokenizer's
    /// ids of the text as `[id, ...]`, as `scripts/llama-bench.sh tokenize` prints
    /// llama.cpp's, to compare the two on any text.
    #[test]
    #[ignore]
    fn probe() {
        let (Ok(m), Ok(t)) = (std::env::var("TFBENCH_PROBE_MODEL"), std::env::var("TFBENCH_PROBE_TEXT"))
        else {
            eprintln!("skipped: set TFBENCH_PROBE_MODEL and TFBENCH_PROBE_TEXT");
            return;
        };
        let f = crate::model::gguf::GgufFile::open(std::path::Path::new(&m), None).unwrap();
        let ft = tokenizer::from_header(&f.header).unwrap();
        let ids = ft.encode(&std::fs::read_to_string(t).unwrap()).unwrap();
        println!("{ids:?}");
    }

    #[test]
    fn a_vocabulary_without_a_reference_is_checked_by_round_trip_only() {
        let fp = "0000000000000000";
        assert!(reference(fp).unwrap().is_none());
        use crate::model::gguf::Value;
        let s = |x: &str| Value::Str(x.into());
        let h = Header {
            version: 3,
            metadata: vec![
                ("tokenizer.ggml.model".into(), s("gpt2")),
                ("tokenizer.ggml.tokens".into(), Value::Array(vec![s("a"), s("b")])),
                ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
            ],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let t = tokenizer::from_header(&h).unwrap();
        // A two-letter vocabulary cannot spell the text: the round trip fails loudly.
        assert!(verify(&t, fp).is_err());
    }
}
