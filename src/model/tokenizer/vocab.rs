//! The vocabulary as llama.cpp's `llama_vocab` holds it for the SentencePiece
//! (`llama`) and WordPiece (`bert`) tokenizers, and its special-token
//! partition of the text (`tokenizer_st_partition`), both written by hand
//! after llama.cpp build 0c1e570 (`src/llama-vocab.cpp`) because the
//! `tokenizers` crate's added-token matching is not llama.cpp's (llama.cpp
//! splits on one token at a time, longest first, over the whole text).

use crate::model::gguf::{Header, Value};
use anyhow::{Result, anyhow, bail};
use std::collections::HashMap;

/// llama.cpp's `LLAMA_TOKEN_TYPE_*` values in `tokenizer.ggml.token_type`.
pub mod ty {
    /// An ordinary piece.
    pub const NORMAL: i32 = 1;
    /// `<unk>`.
    pub const UNKNOWN: i32 = 2;
    /// `<s>`, `</s>`, `[CLS]`: matched in the text only when special tokens are parsed.
    pub const CONTROL: i32 = 3;
    /// Added by the model's authors: always matched whole in the text.
    pub const USER_DEFINED: i32 = 4;
    /// `<0x41>`: one byte, SentencePiece's byte fallback.
    pub const BYTE: i32 = 6;
}

/// A run of raw text, or a token the partition found written in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fragment<'a> {
    /// Text still to tokenize.
    Text(&'a str),
    /// A special token's id.
    Token(u32),
}

/// Token texts, scores and types, and the text-to-id map.
pub struct LlamaVocab {
    /// Token texts by id (an empty text is renamed `[EMPTY_i]`, as llama.cpp does).
    pub texts: Vec<String>,
    /// Scores by id (0 when the file has none).
    pub scores: Vec<f32>,
    /// Token types by id ([`ty`]; NORMAL when the file has none).
    pub types: Vec<i32>,
    /// Text to id; of duplicate texts the last id wins, as in llama.cpp.
    pub ids: HashMap<String, u32>,
    /// Longest token text in bytes.
    pub max_len: usize,
    /// Control, user-defined and unknown tokens, longest text first, each
    /// with whether it eats the whitespace on its left and on its right.
    specials: Vec<Special>,
}

/// A token the partition cuts out of the text.
#[derive(Debug, Clone, Copy)]
struct Special {
    id: u32,
    lstrip: bool,
    rstrip: bool,
}

/// C's `isspace` in the C locale, which llama.cpp's strip uses.
fn c_space(c: char) -> bool {
    matches!(c, ' ' | '\t'..='\r')
}

/// The whitespace-eating tokens llama.cpp assigns by model name (its
/// `_set_token_attr` rules): `<mask>` of the Jina v2 / nomic-bert-moe /
/// jina-bert-v3 files and `[MASK]` of ModernBERT eat the space on their
/// left; Phi-3's special tokens eat the whitespace on their right, except
/// `<unk>`, `<s>` and `<|endoftext|>`.
fn strip_rules(h: &Header, text: &str) -> (bool, bool) {
    let get = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (pre, arch, name) =
        (get("tokenizer.ggml.pre"), get("general.architecture"), get("general.name").to_lowercase());
    let any = |s: &str, of: &[&str]| of.iter().any(|x| s.contains(x));
    if any(&pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
        || any(&arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        (text == "<mask>", false)
    } else if any(&name, &["phi-3", "phi3"]) {
        (false, !matches!(text, "<unk>" | "<s>" | "<|endoftext|>"))
    } else if name.contains("modern-bert") {
        (text == "[MASK]", false)
    } else {
        (false, false)
    }
}

/// Texts llama.cpp treats as end-of-generation and so as control tokens
/// whatever type the file gives them (its `special_eog_ids` list, build
/// 0c1e570). Not copied: its end-of-turn and fill-in-the-middle guesses,
/// which promote only the first match of an unordered map and yield to the
/// file's own `*_token_id` keys.
pub const CONTROL_LOOKING: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];

/// The token types as llama.cpp ends up with them: the file's
/// `tokenizer.ggml.token_type` (NORMAL when absent), with every
/// [`CONTROL_LOOKING`] text made a control token, except a `</s>` that
/// Gemma-4 and PLaMo files (`<|tool_response>` or `<|plamo:eos|>` among those
/// texts) keep as an ordinary one.
pub fn token_types(h: &Header, tokens: &[&str]) -> Result<Vec<i32>> {
    let mut types: Vec<i32> = match numbers(h, "tokenizer.ggml.token_type", tokens.len())? {
        Some(t) => t.iter().map(|&x| x as i32).collect(),
        None => vec![ty::NORMAL; tokens.len()],
    };
    let mut normal_s = false;
    let mut s_id = None;
    for (i, t) in tokens.iter().enumerate() {
        if CONTROL_LOOKING.contains(t) || *t == "<|plamo:eos|>" {
            normal_s |= matches!(*t, "<|tool_response>" | "<|plamo:eos|>");
            if *t == "</s>" {
                s_id = Some(i);
            }
            if *t != "<|plamo:eos|>" {
                types[i] = ty::CONTROL;
            }
        }
    }
    if let (true, Some(i)) = (normal_s, s_id) {
        types[i] = ty::NORMAL;
    }
    Ok(types)
}

fn number(v: &Value) -> Option<f64> {
    match *v {
        Value::I32(x) => Some(f64::from(x)),
        Value::I64(x) => Some(x as f64),
        Value::I8(x) => Some(f64::from(x)),
        Value::I16(x) => Some(f64::from(x)),
        _ => v.as_f64().or_else(|| v.as_u64().map(|x| x as f64)),
    }
}

/// The numeric array `key` with at least `n` entries, or `None` when absent.
fn numbers(h: &Header, key: &str, n: usize) -> Result<Option<Vec<f64>>> {
    let Some(v) = h.get(key) else { return Ok(None) };
    let a = v.as_array().ok_or_else(|| anyhow!("metadata `{key}` is not an array"))?;
    if a.len() < n {
        bail!("metadata `{key}` has {} entries for {n} tokens", a.len());
    }
    a.iter()
        .enumerate()
        .map(|(i, v)| number(v).ok_or_else(|| anyhow!("metadata `{key}`[{i}] is not a number")))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

impl LlamaVocab {
    /// Reads `tokenizer.ggml.tokens`, `.scores` and `.token_type`.
    pub fn from_header(h: &Header, tokens: &[&str]) -> Result<Self> {
        let n = tokens.len();
        let scores = numbers(h, "tokenizer.ggml.scores", n)?;
        let types = token_types(h, tokens)?;
        let mut v = LlamaVocab {
            texts: Vec::with_capacity(n),
            scores: Vec::with_capacity(n),
            types: Vec::with_capacity(n),
            ids: HashMap::with_capacity(n),
            max_len: 0,
            specials: Vec::new(),
        };
        for (i, t) in tokens.iter().enumerate() {
            let text = if t.is_empty() { format!("[EMPTY_{i}]") } else { t.to_string() };
            v.max_len = v.max_len.max(text.len());
            v.ids.insert(text.clone(), i as u32);
            v.texts.push(text);
            v.scores.push(scores.as_ref().map_or(0.0, |s| s[i] as f32));
            v.types.push(types[i]);
        }
        v.specials = (0..n as u32)
            .filter(|&i| matches!(v.types[i as usize], ty::CONTROL | ty::USER_DEFINED | ty::UNKNOWN))
            .map(|id| {
                let (lstrip, rstrip) = strip_rules(h, &v.texts[id as usize]);
                Special { id, lstrip, rstrip }
            })
            .collect();
        // llama.cpp sorts by length with the unstable std::sort; equal lengths
        // keep id order here (they differ only when two such tokens overlap).
        v.specials.sort_by_key(|s| std::cmp::Reverse(v.texts[s.id as usize].len()));
        Ok(v)
    }

    /// The id of `text`, if it is a token.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The id of the special token `key` (`tokenizer.ggml.unknown_token_id`), checked.
    pub fn special_id(&self, h: &Header, key: &str) -> Result<Option<u32>> {
        let Some(v) = h.get(key) else { return Ok(None) };
        match v.as_u64() {
            Some(id) if (id as usize) < self.texts.len() => Ok(Some(id as u32)),
            _ => bail!("metadata `{key}` = {v:?} is not a token id below {}", self.texts.len()),
        }
    }

    /// `text` cut at every special token written in it, as llama.cpp's
    /// `tokenizer_st_partition`: for each special token, longest first, every
    /// occurrence in every text fragment becomes that token. Control and
    /// unknown tokens only when `parse_special`; user-defined ones always.
    /// A token that strips (see `strip_rules`) takes the whitespace beside it.
    pub fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = if text.is_empty() { Vec::new() } else { vec![Fragment::Text(text)] };
        for &Special { id, lstrip, rstrip } in &self.specials {
            let t = self.types[id as usize];
            if !parse_special && (t == ty::CONTROL || t == ty::UNKNOWN) {
                continue;
            }
            let needle = self.texts[id as usize].as_str();
            if !frags.iter().any(|f| matches!(f, Fragment::Text(s) if s.contains(needle))) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(mut s) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(at) = s.find(needle) {
                    let left = if lstrip { s[..at].trim_end_matches(c_space) } else { &s[..at] };
                    if !left.is_empty() {
                        next.push(Fragment::Text(left));
                    }
                    next.push(Fragment::Token(id));
                    s = &s[at + needle.len()..];
                    if rstrip {
                        s = s.trim_start_matches(c_space);
                    }
                }
                if !s.is_empty() {
                    next.push(Fragment::Text(s));
                }
            }
            frags = next;
        }
        frags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[(&str, i32)]) -> LlamaVocab {
        let h = Header {
            version: 3,
            metadata: vec![(
                "tokenizer.ggml.token_type".into(),
                Value::Array(tokens.iter().map(|t| Value::I32(t.1)).collect()),
            )],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let texts: Vec<&str> = tokens.iter().map(|t| t.0).collect();
        LlamaVocab::from_header(&h, &texts).unwrap()
    }

    #[test]
    fn partition_cuts_longest_specials_first_and_control_only_when_parsed() {
        let v =
            vocab(&[("<s>", ty::CONTROL), ("<s>x", ty::USER_DEFINED), ("a", ty::NORMAL), ("", ty::NORMAL)]);
        assert_eq!(v.texts[3], "[EMPTY_3]");
        use Fragment::*;
        // `<s>x` (longer) is taken before `<s>`.
        assert_eq!(v.partition("a<s>xb<s>", true), vec![Text("a"), Token(1), Text("b"), Token(0)]);
        // Without parse_special the control token stays text; user-defined still cut.
        assert_eq!(v.partition("a<s>xb<s>", false), vec![Text("a"), Token(1), Text("b<s>")]);
        assert_eq!(v.partition("", true), vec![]);
        assert_eq!(v.partition("<s><s>", true), vec![Token(0), Token(0)]);
    }

    #[test]
    fn phi_3_special_tokens_eat_the_whitespace_on_their_right() {
        let toks = [("<|end|>", ty::USER_DEFINED), ("<s>", ty::CONTROL), ("a", ty::NORMAL)];
        let h = Header {
            version: 3,
            metadata: vec![
                ("general.name".into(), Value::Str("Phi3-mini".into())),
                (
                    "tokenizer.ggml.token_type".into(),
                    Value::Array(toks.iter().map(|t| Value::I32(t.1)).collect()),
                ),
            ],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let texts: Vec<&str> = toks.iter().map(|t| t.0).collect();
        let v = LlamaVocab::from_header(&h, &texts).unwrap();
        use Fragment::*;
        // `<|end|>` takes the spaces and newline after it, `<s>` keeps them.
        assert_eq!(
            v.partition("a <|end|> \n a <s> a", true),
            vec![Text("a "), Token(0), Text("a "), Token(1), Text(" a")]
        );
        assert_eq!(v.partition("<|end|>  ", true), vec![Token(0)]);
    }

    #[test]
    fn end_of_generation_texts_become_control_tokens_as_in_llama_cpp() {
        let v = vocab(&[("</s>", ty::NORMAL), ("<|im_end|>", ty::USER_DEFINED), ("<x>", ty::NORMAL)]);
        assert_eq!(v.types, vec![ty::CONTROL, ty::CONTROL, ty::NORMAL]);
        // Not parsed without parse_special, like any control token.
        assert_eq!(v.partition("a</s>", false), vec![Fragment::Text("a</s>")]);
        assert_eq!(v.partition("a</s>", true), vec![Fragment::Text("a"), Fragment::Token(0)]);
        // Gemma-4's `</s>` stays ordinary.
        let g = vocab(&[("</s>", ty::NORMAL), ("<|tool_response>", ty::NORMAL)]);
        assert_eq!(g.types, vec![ty::NORMAL, ty::CONTROL]);
    }

    #[test]
    fn short_score_arrays_are_refused_naming_the_key() {
        let h = Header {
            version: 3,
            metadata: vec![("tokenizer.ggml.scores".into(), Value::Array(vec![Value::F32(0.0)]))],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let e = LlamaVocab::from_header(&h, &["a", "b"]).err().unwrap().to_string();
        assert!(e.contains("tokenizer.ggml.scores") && e.contains("1 entries for 2 tokens"), "{e}");
    }
}
