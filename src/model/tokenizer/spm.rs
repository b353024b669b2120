//! llama.cpp's SentencePiece tokenizer (`tokenizer.ggml.model = llama`),
//! written by hand after `llm_tokenizer_spm_session` (build 0c1e570).
//!
//! Not through the `tokenizers` crate: llama.cpp merges *any* adjacent pair
//! whose concatenation is a vocabulary entry, the entry with the highest
//! score first and, among equal scores, the leftmost pair; a `tokenizers`
//! BPE needs an explicit merge list with one rank per pair, so equal scores
//! (common: every byte and control token scores 0) would be ordered by list
//! position instead of text position, and its Unigram model finds the best
//! segmentation rather than the greedy one. The loop below is the same
//! algorithm, so it agrees by construction, and the tests check it against
//! llama.cpp's own expected ids.
//!
//! Steps: special tokens are cut out first ([`LlamaVocab::partition`]); each
//! text fragment gets a leading space when `add_space_prefix` is set and it
//! starts the text or follows a special token; spaces become U+2581 (`▁`);
//! the fragment is split into characters and the best-scoring mergeable pair
//! is merged until none is left; a final piece that is not a token (a
//! character outside the vocabulary) is spelled as byte tokens `<0xXX>`.

use super::vocab::{Fragment, LlamaVocab, ty};
use anyhow::{Result, bail};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A SentencePiece vocabulary with llama.cpp's flags.
pub struct Spm {
    /// The vocabulary.
    pub vocab: LlamaVocab,
    /// `tokenizer.ggml.add_space_prefix` (default true for `llama`, as in llama.cpp).
    pub add_space_prefix: bool,
    /// Control tokens written in the text become their ids.
    pub parse_special: bool,
    /// The byte-fallback token of each byte (`<0xXX>`, else the byte itself as a
    /// one-character token), when the vocabulary has it.
    bytes: [Option<u32>; 256],
}

/// A piece of the text being merged: bytes `start..start + n`, linked to
/// its neighbours (`n == 0` once merged into its left neighbour).
#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    n: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` and `right` into a token of `score`; `size`
/// is the merged length, so a candidate made stale by another merge is skipped.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// The max-heap's top: the highest score, then the leftmost pair
    /// (llama.cpp's `llm_bigram_spm::comparator`).
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then_with(|| o.left.cmp(&self.left))
    }
}

impl Spm {
    /// Wraps `vocab` with its flags.
    pub fn new(vocab: LlamaVocab, add_space_prefix: bool, parse_special: bool) -> Self {
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = vocab.id(&format!("<0x{b:02X}>")).or_else(|| {
                // llama.cpp falls back to the byte as a string (only ASCII is valid UTF-8 alone).
                u8::try_from(b).ok().filter(u8::is_ascii).and_then(|c| vocab.id(&(c as char).to_string()))
            });
        }
        Spm { vocab, add_space_prefix, parse_special, bytes }
    }

    /// `text`'s ids (no BOS/EOS, as llama.cpp with `add_special = false`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut prev_special = true;
        let mut buf = String::new();
        for f in self.vocab.partition(text, self.parse_special) {
            match f {
                Fragment::Text(s) => {
                    buf.clear();
                    if self.add_space_prefix && prev_special {
                        buf.push(' ');
                    }
                    buf.push_str(s);
                    let escaped = buf.replace(' ', "\u{2581}");
                    self.merge(&escaped, &mut out)?;
                    prev_special = false;
                }
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
            }
        }
        Ok(out)
    }

    fn try_add(
        &self,
        text: &str,
        syms: &[Sym],
        left: Option<usize>,
        right: Option<usize>,
        q: &mut BinaryHeap<Bigram>,
    ) {
        let (Some(left), Some(right)) = (left, right) else { return };
        let (l, r) = (syms[left], syms[right]);
        let piece = &text[l.start..r.start + r.n];
        if let Some(id) = self.vocab.id(piece) {
            q.push(Bigram { score: self.vocab.scores[id as usize], left, right, size: piece.len() });
        }
    }

    /// One fragment's merge loop, appending its ids to `out`.
    fn merge(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
        let mut iter = text.char_indices().peekable();
        while let Some((start, c)) = iter.next() {
            let i = syms.len();
            syms.push(Sym {
                start,
                n: c.len_utf8(),
                prev: i.checked_sub(1),
                next: iter.peek().map(|_| i + 1),
            });
        }
        let mut q = BinaryHeap::with_capacity(syms.len());
        for i in 1..syms.len() {
            self.try_add(text, &syms, Some(i - 1), Some(i), &mut q);
        }
        while let Some(b) = q.pop() {
            let (l, r) = (syms[b.left], syms[b.right]);
            if l.n == 0 || r.n == 0 || l.n + r.n != b.size {
                continue;
            }
            syms[b.left].n += r.n;
            syms[b.right].n = 0;
            syms[b.left].next = r.next;
            if let Some(n) = r.next {
                syms[n].prev = Some(b.left);
            }
            self.try_add(text, &syms, syms[b.left].prev, Some(b.left), &mut q);
            self.try_add(text, &syms, Some(b.left), syms[b.left].next, &mut q);
        }
        // Every merged piece is a token (a pair is only queued when it is), so
        // llama.cpp's `rev_merge` re-segmentation never applies to a valid UTF-8
        // text: a piece that is no token is one character, spelled as bytes.
        let mut i = if syms.is_empty() { None } else { Some(0) };
        while let Some(k) = i {
            let s = syms[k];
            let piece = &text[s.start..s.start + s.n];
            match self.vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        match self.bytes[b as usize] {
                            Some(id) => out.push(id),
                            None => bail!(
                                "the vocabulary has no token for `{piece}` and no byte-fallback token <0x{b:02X}>"
                            ),
                        }
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }

    /// The text of `ids`: `▁` back to spaces, byte tokens to their bytes,
    /// special tokens written out; the space [`Spm::encode`] put before each
    /// text fragment is taken off again, so decode inverts encode.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut out: Vec<u8> = Vec::new();
        let mut fragment_start = true;
        for &id in ids {
            let Some(text) = self.vocab.texts.get(id as usize) else {
                bail!("id {id} is outside the vocabulary of {}", self.vocab.texts.len());
            };
            let t = self.vocab.types[id as usize];
            let piece: Vec<u8> = match t {
                ty::CONTROL | ty::USER_DEFINED | ty::UNKNOWN => {
                    out.extend_from_slice(text.as_bytes());
                    fragment_start = true;
                    continue;
                }
                ty::BYTE => match text.strip_prefix("<0x").and_then(|h| h.strip_suffix('>')) {
                    Some(h) => vec![u8::from_str_radix(h, 16)?],
                    None => text.as_bytes().to_vec(),
                },
                _ => text.replace('\u{2581}', " ").into_bytes(),
            };
            let skip = usize::from(fragment_start && self.add_space_prefix && piece.first() == Some(&b' '));
            out.extend_from_slice(&piece[skip..]);
            fragment_start = false;
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::{Header, Value};

    /// A vocabulary with scores chosen so the greedy merge order matters.
    fn spm(add_space_prefix: bool) -> Spm {
        let toks: &[(&str, f32, i32)] = &[
            ("<unk>", 0.0, ty::UNKNOWN),
            ("<s>", 0.0, ty::CONTROL),
            ("<0x41>", 0.0, ty::BYTE),
            ("<0xC3>", 0.0, ty::BYTE),
            ("<0xA9>", 0.0, ty::BYTE),
            ("\u{2581}", -1.0, ty::NORMAL),
            ("a", -2.0, ty::NORMAL),
            ("b", -2.0, ty::NORMAL),
            ("ab", -5.0, ty::NORMAL),
            ("bb", -3.0, ty::NORMAL),
            ("\u{2581}a", -4.0, ty::NORMAL),
            ("abb", -1.5, ty::NORMAL),
        ];
        let h = Header {
            version: 3,
            metadata: vec![
                (
                    "tokenizer.ggml.scores".into(),
                    Value::Array(toks.iter().map(|t| Value::F32(t.1)).collect()),
                ),
                (
                    "tokenizer.ggml.token_type".into(),
                    Value::Array(toks.iter().map(|t| Value::I32(t.2)).collect()),
                ),
            ],
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let texts: Vec<&str> = toks.iter().map(|t| t.0).collect();
        Spm::new(LlamaVocab::from_header(&h, &texts).unwrap(), add_space_prefix, true)
    }

    #[test]
    fn merges_highest_score_first_then_leftmost_with_byte_fallback() {
        let s = spm(false);
        // "abb": bb (-3) beats ab (-5), then a+bb is abb (-1.5): one token.
        assert_eq!(s.encode("abb").unwrap(), vec![11]);
        // "abb ab" with the prefix: the stale ▁a of the first word is skipped.
        assert_eq!(spm(true).encode("abb ab").unwrap(), vec![5, 11, 10, 7]);
        // "abab": two ab at -5 (leftmost first), then ab+ab is no token.
        assert_eq!(s.encode("abab").unwrap(), vec![8, 8]);
        // Space prefix: " a" -> ▁a; A and é are not tokens: byte tokens.
        let p = spm(true);
        assert_eq!(p.encode("a").unwrap(), vec![10]);
        assert_eq!(p.encode("A\u{e9}").unwrap(), vec![5, 2, 3, 4]);
        // A control token written in the text; the fragment after it gets the prefix again.
        assert_eq!(p.encode("a<s>a").unwrap(), vec![10, 1, 10]);
        for text in ["a<s>a", "abb ab", "A\u{e9} a", " a"] {
            assert_eq!(p.decode(&p.encode(text).unwrap()).unwrap(), text);
        }
        assert_eq!(p.encode("").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn a_character_without_byte_tokens_is_an_error_naming_it() {
        let s = spm(false);
        let e = s.encode("z").err().unwrap().to_string();
        assert!(e.contains("`z`") && e.contains("<0x7A>"), "{e}");
        assert!(s.decode(&[99]).is_err());
    }
}
