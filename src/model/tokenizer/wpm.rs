//! llama.cpp's WordPiece tokenizer (`tokenizer.ggml.model = bert`), written
//! by hand after `llm_tokenizer_wpm_session` (build 0c1e570).
//!
//! Not through the `tokenizers` crate: its BERT normalizer and pre-tokenizer
//! classify characters with another Unicode version and other classes
//! (`\p{Cc}` where llama.cpp drops all of `\p{C}`, multi-character
//! lowercasing, a full NFD where llama.cpp keeps the first code point of
//! each decomposition), and its WordPiece gives `[UNK]` for words over 100
//! characters, which llama.cpp does not. The GGUF vocabulary is also stored
//! the other way round: word-initial pieces carry a `▁` prefix, continuations
//! none (`##` removed).
//!
//! Steps: special tokens are cut out first; each text fragment is split into
//! words at whitespace, with punctuation, ASCII symbols and CJK ideographs
//! as words of their own, control characters dropped, optionally lowercased
//! and stripped of accents ([`super::unicode`], llama.cpp's tables); each
//! word, prefixed with `▁`, is spelled by the longest token at each position,
//! or is `[UNK]` as a whole when some position has none.

use super::unicode::{self, ACCENT_MARK, CONTROL, PUNCTUATION, SYMBOL, Tables, WHITESPACE};
use super::vocab::{Fragment, LlamaVocab, ty};
use anyhow::{Result, bail};

/// A WordPiece vocabulary with llama.cpp's normalizer flags.
pub struct Wpm {
    vocab: LlamaVocab,
    lowercase: bool,
    strip_accents: bool,
    unk: Option<u32>,
    parse_special: bool,
    tables: &'static Tables,
}

/// CJK ideographs, each a word of its own (llama.cpp's list, which keeps the
/// `tokenizers` crate's 0x2B920 where the standard says 0x2B820).
fn is_chinese(c: u32) -> bool {
    matches!(c, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

impl Wpm {
    /// Wraps `vocab`; `unk` defaults to 100, BERT's `[UNK]`, as in llama.cpp.
    pub fn new(
        vocab: LlamaVocab,
        lowercase: bool,
        strip_accents: bool,
        unk: Option<u32>,
        parse_special: bool,
    ) -> Result<Self> {
        let unk = unk.or(Some(100).filter(|&i| (i as usize) < vocab.texts.len()));
        Ok(Wpm { vocab, lowercase, strip_accents, unk, parse_special, tables: unicode::tables()? })
    }

    /// llama.cpp's `preprocess`: the words of `text`.
    fn words(&self, text: &str) -> Vec<String> {
        let t = self.tables;
        let mut words = vec![String::new()];
        for c in text.chars() {
            let cpt = if self.strip_accents { t.nfd(c as u32) } else { c as u32 };
            let f = t.flags(cpt);
            if f & WHITESPACE != 0 {
                if !words.last().is_some_and(String::is_empty) {
                    words.push(String::new());
                }
                continue;
            }
            if cpt == 0 || cpt == 0xFFFD || f & CONTROL != 0 || (self.strip_accents && f & ACCENT_MARK != 0) {
                continue;
            }
            let out = if self.lowercase { t.lower(cpt) } else { cpt };
            // A code point llama.cpp would write as invalid UTF-8 cannot occur:
            // the tables map characters to characters.
            let Some(ch) = char::from_u32(out) else { continue };
            let last = words.len() - 1;
            if f & PUNCTUATION != 0 || (cpt < 0x7F && f & SYMBOL != 0) || is_chinese(cpt) {
                if !words[last].is_empty() {
                    words.push(String::new());
                }
                let last = words.len() - 1;
                words[last] = ch.to_string();
                words.push(String::new());
            } else {
                words[last].push(ch);
            }
        }
        if words.last().is_some_and(String::is_empty) {
            words.pop();
        }
        words
    }

    /// `text`'s ids (no `[CLS]`/`[SEP]`, as llama.cpp with `add_special = false`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 4 + 1);
        for f in self.vocab.partition(text, self.parse_special) {
            let s = match f {
                Fragment::Token(id) => {
                    out.push(id);
                    continue;
                }
                Fragment::Text(s) => s,
            };
            for word in self.words(s) {
                let w = format!("\u{2581}{word}");
                let before = out.len();
                let mut i = 0;
                while i < w.len() {
                    let end = w.len().min(i + self.vocab.max_len + 1);
                    // Longest piece first; a cut inside a character is never a token.
                    let hit = (i + 1..=end)
                        .rev()
                        .find_map(|j| w.get(i..j).and_then(|p| self.vocab.id(p)).map(|id| (id, j)));
                    match hit {
                        Some((id, j)) => {
                            out.push(id);
                            i = j;
                        }
                        None => {
                            out.truncate(before);
                            break;
                        }
                    }
                }
                if out.len() == before {
                    match self.unk {
                        Some(u) => out.push(u),
                        None => bail!(
                            "`{word}` has no spelling in the vocabulary and the file names no unknown token"
                        ),
                    }
                }
            }
        }
        Ok(out)
    }

    /// The text of `ids`: word-initial pieces (`▁` prefix) start a new word
    /// after a space, continuations are glued on, special tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut out = String::new();
        for &id in ids {
            let Some(text) = self.vocab.texts.get(id as usize) else {
                bail!("id {id} is outside the vocabulary of {}", self.vocab.texts.len());
            };
            match self.vocab.types[id as usize] {
                ty::CONTROL | ty::USER_DEFINED | ty::UNKNOWN => out.push_str(text),
                _ => out.push_str(&text.replace('\u{2581}', " ")),
            }
        }
        Ok(out.strip_prefix(' ').map(str::to_string).unwrap_or(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::{Header, Value};

    fn wpm(lowercase: bool) -> Wpm {
        let toks: &[(&str, i32)] = &[
            ("[UNK]", ty::UNKNOWN),
            ("[CLS]", ty::CONTROL),
            ("\u{2581}hello", ty::NORMAL),
            ("\u{2581}he", ty::NORMAL),
            ("llo", ty::NORMAL),
            ("\u{2581},", ty::NORMAL),
            ("\u{2581}cafe", ty::NORMAL),
            ("\u{2581}\u{4e2d}", ty::NORMAL),
            ("s", ty::NORMAL),
        ];
        let h = Header {
            version: 3,
            metadata: vec![(
                "tokenizer.ggml.token_type".into(),
                Value::Array(toks.iter().map(|t| Value::I32(t.1)).collect()),
            )],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let texts: Vec<&str> = toks.iter().map(|t| t.0).collect();
        Wpm::new(LlamaVocab::from_header(&h, &texts).unwrap(), lowercase, lowercase, Some(0), true).unwrap()
    }

    #[test]
    fn splits_normalizes_and_spells_longest_first() {
        let w = wpm(true);
        assert_eq!(
            w.words("Hello,  Caf\u{e9}s\u{4e2d}x\u{200d}y\t"),
            vec!["hello", ",", "cafes", "\u{4e2d}", "xy"]
        );
        // hello whole (longest), then `,`, cafe + s, 中, and `xy` has no spelling: [UNK].
        assert_eq!(w.encode("Hello, Caf\u{e9}s \u{4e2d} xy").unwrap(), vec![2, 5, 6, 8, 7, 0]);
        // A word spelled only in part is [UNK] as a whole; [CLS] written in the text is cut out.
        assert_eq!(w.encode("hellox[CLS]hello").unwrap(), vec![0, 1, 2]);
        assert_eq!(w.decode(&[2, 5, 6, 8]).unwrap(), "hello , cafes");
        // Without lowercasing, `Hello` is no token.
        assert_eq!(wpm(false).encode("Hello hello").unwrap(), vec![0, 2]);
    }
}
