//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`), rebuilt as a
//! Hugging Face `tokenizers` pipeline that splits text as llama.cpp does.
//!
//! Supported: `tokenizer.ggml.model = gpt2` (byte-level BPE: `tokens`,
//! `merges`) with the pre-tokenizers in [`PRE_TOKENIZERS`]. llama.cpp splits
//! text with a list of regular expressions applied in turn, each keeping
//! what it matched and what lay between as separate pieces; that is exactly
//! a sequence of `Split` pre-tokenizers with the `Isolated` behaviour, so the
//! expressions below are copied from llama.cpp's `llama-vocab.cpp` (build
//! 0c1e570) unchanged. The pieces are then byte-encoded (GPT-2's byte to
//! character table) and merged by the file's merge ranks.
//!
//! As `llama-tokenize` does by default (`--parse-special`, what chat
//! templates need), control tokens (type 3, `<|im_start|>`) written in the
//! text become their ids, and user-defined tokens (type 4) are matched whole.
//! No BOS/EOS is added.
//!
//! `tokenizer.ggml.model = llama` (SentencePiece, [`spm`]) and `bert`
//! (WordPiece, [`wpm`]) are llama.cpp's own algorithms written by hand, on
//! the vocabulary as llama.cpp reads it ([`vocab`]); each module says why the
//! `tokenizers` crate does not reproduce them.

use crate::model::gguf::{Header, Value};
use anyhow::{Result, bail};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

#[cfg(test)]
mod llama_tests;
pub mod spm;
mod unicode;
pub mod vocab;
pub mod wpm;

/// GPT-2's expression (llama.cpp omits its trailing `|\s+`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// LLaMA 3's, as llama.cpp adapts it (case-insensitive contractions spelled out).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's: LLaMA 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One family of `tokenizer.ggml.pre` values llama.cpp treats alike.
pub struct PreTokenizer {
    /// The `tokenizer.ggml.pre` values (`default` also stands for a missing key).
    pub names: &'static [&'static str],
    /// llama.cpp's expressions, applied in order.
    pub regexes: &'static [&'static str],
    /// A piece that is itself a vocabulary entry is taken whole (llama.cpp's
    /// `ignore_merges`, set for LLaMA 3).
    pub ignore_merges: bool,
}

/// The pre-tokenizers this module builds (llama.cpp's `llm_tokenizer_bpe`).
pub const PRE_TOKENIZERS: &[PreTokenizer] = &[
    PreTokenizer {
        names: &["gpt-2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe", "exaone4", "mellum", "modern-bert"],
        regexes: &[GPT2],
        ignore_merges: false,
    },
    PreTokenizer {
        names: &["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"],
        regexes: &[r"\p{N}", GPT2],
        ignore_merges: false,
    },
    PreTokenizer {
        names: &["llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"],
        regexes: &[LLAMA3],
        ignore_merges: true,
    },
    PreTokenizer {
        names: &["qwen2", "deepseek-r1-qwen", "stablelm2"],
        regexes: &[QWEN2],
        ignore_merges: false,
    },
    PreTokenizer {
        names: &["default"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
        ignore_merges: false,
    },
];

fn tk<T>(r: tokenizers::Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{e}"))
}

fn strings<'a>(h: &'a Header, key: &str) -> Result<Vec<&'a str>> {
    let a = h
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing or not an array"))?;
    a.iter()
        .enumerate()
        .map(|(i, v)| v.as_str().ok_or_else(|| anyhow::anyhow!("metadata `{key}`[{i}] is not a string")))
        .collect()
}

/// The algorithm behind a [`FileTokenizer`].
enum Engine {
    /// Byte-level BPE through the `tokenizers` crate.
    Bpe(Box<Tokenizer>),
    /// llama.cpp's SentencePiece.
    Spm(Box<spm::Spm>),
    /// llama.cpp's WordPiece.
    Wpm(wpm::Wpm),
}

/// What [`from_header`] built, with what a report should say about it.
pub struct FileTokenizer {
    engine: Engine,
    /// `gpt2/smollm`, `llama/spm`, `bert/wpm`: the model and pre-tokenizer names.
    pub kind: String,
    /// Vocabulary entries.
    pub vocab: usize,
}

impl FileTokenizer {
    /// A `tokenizers` pipeline as it is (a Hugging Face directory's
    /// `tokenizer.json`, whatever its model), encoding without added special
    /// tokens and without the file's truncation or padding: those fit a
    /// model's inputs (sentence-transformers cut at 128 ids), while tfbench
    /// encodes whole texts.
    pub fn from_tokenizers(mut t: Tokenizer) -> Self {
        // Turning both off cannot fail (only a bad stride can).
        let _ = t.with_truncation(None);
        t.with_padding(None);
        let vocab = t.get_vocab_size(true);
        Self { engine: Engine::Bpe(Box::new(t)), kind: "tokenizer.json".into(), vocab }
    }

    /// `text`'s ids (no BOS/EOS added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.engine {
            Engine::Bpe(t) => Ok(tk(t.encode(text, false))?.get_ids().to_vec()),
            Engine::Spm(t) => t.encode(text),
            Engine::Wpm(t) => t.encode(text),
        }
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.engine {
            Engine::Bpe(t) => tk(t.decode(ids, false)),
            Engine::Spm(t) => t.decode(ids),
            Engine::Wpm(t) => t.decode(ids),
        }
    }

    /// Whether decode gives every text back byte for byte. WordPiece does
    /// not: it lowercases, drops accents and whitespace, and spells unknown
    /// words `[UNK]` (llama.cpp's, or a `tokenizer.json` of that model).
    pub fn round_trips(&self) -> bool {
        match &self.engine {
            Engine::Bpe(t) => !matches!(t.get_model(), tokenizers::models::ModelWrapper::WordPiece(_)),
            Engine::Spm(_) => true,
            Engine::Wpm(_) => false,
        }
    }
}

/// The `tokenizer.ggml.model` values tfbench builds a tokenizer for.
pub const MODELS: &[&str] = &["gpt2", "llama", "bert"];

/// `h`'s `tokenizer.ggml.model` (`(none)` when absent), and whether it is
/// one of [`MODELS`]: a file without one is not an error, it has nothing to time.
pub fn model_of(h: &Header) -> (&str, bool) {
    let m = h.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("(none)");
    (m, MODELS.contains(&m))
}

/// The tokenizer described by `h`'s `tokenizer.ggml.*` keys, parsing special
/// tokens written in the text (what `llama-tokenize` does by default), or an
/// error naming the key and the supported values.
pub fn from_header(h: &Header) -> Result<FileTokenizer> {
    from_header_with(h, true)
}

/// [`from_header`], with control tokens written in the text matched
/// (`parse_special`, llama.cpp's flag of that name) or left as text.
pub fn from_header_with(h: &Header, parse_special: bool) -> Result<FileTokenizer> {
    let model = h.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("(none)");
    match model {
        "gpt2" => bpe(h, parse_special),
        "llama" | "bert" => {
            let tokens = strings(h, "tokenizer.ggml.tokens")?;
            let v = vocab::LlamaVocab::from_header(h, &tokens)?;
            let flag = |key: &str, default: bool| h.get(key).and_then(bool_of).unwrap_or(default);
            let (engine, kind) = if model == "llama" {
                // llama.cpp: SentencePiece adds the space prefix unless the file says not to.
                let prefix = flag("tokenizer.ggml.add_space_prefix", true);
                (Engine::Spm(Box::new(spm::Spm::new(v, prefix, parse_special))), "llama/spm")
            } else {
                let lower = flag("tokenizer.ggml.normalizer.lowercase", true);
                let strip = flag("tokenizer.ggml.normalizer.strip_accents", lower);
                let unk = v.special_id(h, "tokenizer.ggml.unknown_token_id")?;
                (Engine::Wpm(wpm::Wpm::new(v, lower, strip, unk, parse_special)?), "bert/wpm")
            };
            Ok(FileTokenizer { engine, kind: kind.to_string(), vocab: tokens.len() })
        }
        _ => bail!(
            "tokenizer.ggml.model `{model}` is not one tfbench builds; supported: gpt2 (byte-level BPE), llama (SentencePiece), bert (WordPiece)"
        ),
    }
}

fn bool_of(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => v.as_u64().map(|x| x != 0),
    }
}

/// The `gpt2` byte-level BPE through the `tokenizers` crate.
fn bpe(h: &Header, parse_special: bool) -> Result<FileTokenizer> {
    let model = "gpt2";
    let pre_name = h.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
    let Some(pre) = PRE_TOKENIZERS.iter().find(|p| p.names.contains(&pre_name)) else {
        let all: Vec<&str> = PRE_TOKENIZERS.iter().flat_map(|p| p.names.iter().copied()).collect();
        bail!("tokenizer.ggml.pre `{pre_name}` is not one tfbench builds; supported: {}", all.join(", "));
    };
    let tokens = strings(h, "tokenizer.ggml.tokens")?;
    let merges = strings(h, "tokenizer.ggml.merges")?;
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    let merges = merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or_else(|| {
                anyhow::anyhow!("metadata `tokenizer.ggml.merges`[{i}] `{m}` is not two tokens")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = tk(BPE::builder().vocab_and_merges(vocab, merges).ignore_merges(pre.ignore_merges).build())?;
    let mut t = Tokenizer::new(bpe);
    let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
    for re in pre.regexes {
        let split =
            tk(Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false))?;
        steps.push(split.into());
    }
    // Bytes to GPT-2's printable characters only: the splitting is done above.
    steps.push(ByteLevel::new(false, false, false).into());
    t.with_pre_tokenizer(Some(Sequence::new(steps)));
    t.with_decoder(Some(ByteLevelDecoder::default()));
    // Control and unknown tokens (when parsing special tokens) and
    // user-defined ones: matched whole in the text before splitting, never
    // byte-encoded. Types as llama.cpp sees them (`</s>` and the like are
    // control tokens whatever the file says).
    let types = vocab::token_types(h, &tokens)?;
    let whole: Vec<AddedToken> = types
        .iter()
        .zip(&tokens)
        .filter_map(|(&ty, s)| match ty {
            vocab::ty::CONTROL | vocab::ty::UNKNOWN if parse_special => {
                Some(AddedToken::from(s.to_string(), true))
            }
            vocab::ty::USER_DEFINED => Some(AddedToken::from(s.to_string(), false).normalized(false)),
            _ => None,
        })
        .collect();
    tk(t.add_tokens(whole))?;
    Ok(FileTokenizer {
        engine: Engine::Bpe(Box::new(t)),
        kind: format!("{model}/{pre_name}"),
        vocab: tokens.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pre: Option<&str>, model: &str) -> Header {
        // A 6-token byte-level vocabulary: a, b, ab, Ġ, Ġab, 1, 2 with merges a b and Ġ ab.
        let s = |x: &str| Value::Str(x.into());
        let mut metadata = vec![
            ("tokenizer.ggml.model".to_string(), s(model)),
            (
                "tokenizer.ggml.tokens".to_string(),
                Value::Array(["a", "b", "ab", "Ġ", "Ġab", "1", "2"].iter().map(|x| s(x)).collect()),
            ),
            ("tokenizer.ggml.merges".to_string(), Value::Array(vec![s("a b"), s("Ġ ab")])),
        ];
        if let Some(p) = pre {
            metadata.push(("tokenizer.ggml.pre".to_string(), s(p)));
        }
        Header { version: 3, metadata, tensors: Vec::new(), alignment: 32, data_offset: 0 }
    }

    #[test]
    fn builds_byte_level_bpe_with_llama_cpp_splitting() {
        let ft = from_header(&header(Some("gpt-2"), "gpt2")).unwrap();
        assert_eq!(ft.kind, "gpt2/gpt-2");
        // " ab" is one piece (` ?\p{L}+`), merged to Ġab; "12" one piece, no merge.
        assert_eq!(ft.encode("ab ab12").unwrap(), vec![2, 4, 5, 6]);
        assert_eq!(ft.decode(&[2, 4, 5, 6]).unwrap(), "ab ab12");
        // smollm isolates every digit first: the same ids, other pieces.
        let sm = from_header(&header(Some("smollm"), "gpt2")).unwrap();
        assert_eq!(sm.encode("ab ab12").unwrap(), vec![2, 4, 5, 6]);
        // A missing pre key is llama.cpp's `default`.
        assert_eq!(from_header(&header(None, "gpt2")).unwrap().kind, "gpt2/default");
    }

    #[test]
    fn refuses_what_it_does_not_build_naming_the_key() {
        let e = from_header(&header(Some("gpt-2"), "rwkv")).err().unwrap().to_string();
        assert!(e.contains("tokenizer.ggml.model `rwkv`") && e.contains("supported: gpt2"), "{e}");
        let e = from_header(&header(Some("klingon"), "gpt2")).err().unwrap().to_string();
        assert!(e.contains("tokenizer.ggml.pre `klingon`") && e.contains("smollm"), "{e}");
        let mut h = header(Some("gpt-2"), "gpt2");
        h.metadata.retain(|(k, _)| k != "tokenizer.ggml.merges");
        let e = from_header(&h).err().unwrap().to_string();
        assert!(e.contains("tokenizer.ggml.merges"), "{e}");
    }

    #[test]
    fn every_expression_compiles() {
        for p in PRE_TOKENIZERS {
            for re in p.regexes {
                assert!(
                    Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
                        .is_ok(),
                    "{re}"
                );
            }
        }
    }
}
