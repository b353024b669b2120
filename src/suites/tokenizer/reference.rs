//! Independent references the workloads are checked against: token ids
//! produced by other implementations (fixtures), GPT-2's byte-to-unicode
//! table and its pre-tokenizer regex run on a different regex engine.

use super::sources::Loaded;
use crate::suites::Verification;
use anyhow::{Context, Result};
use tokenizers::Tokenizer;

/// Ids the reference implementations give for `tests/fixtures/tokenizer/sentences.txt`
/// (`scripts/make-tokenizer-fixtures.sh` wrote them and names each reference).
const KNOWN_IDS: &str = include_str!("../../../tests/fixtures/tokenizer/known_ids.json");

/// Expected `normalize` outputs on the multilingual sample (Python unicodedata).
pub(crate) const NORMALIZED: &str = include_str!("multilingual.normalized.json");

/// Checks `loaded` against the fixture ids when it is a real vocabulary:
/// every sentence must encode (with special tokens) to exactly the ids the
/// reference produced. Trained or user-given tokenizers have no fixture.
pub(crate) fn known_ids(loaded: &Loaded) -> Result<Option<Verification>> {
    let Some(key) = loaded.known_ids else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(KNOWN_IDS).context("known_ids.json")?;
    let sentences = v["sentences"].as_array().context("known_ids.json: sentences")?;
    let want = v[key].as_array().with_context(|| format!("known_ids.json: {key}"))?;
    let reference = format!("known ids from {}", v["references"][key].as_str().unwrap_or(key));
    for (s, w) in sentences.iter().zip(want) {
        let s = s.as_str().context("sentence")?;
        let w: Vec<u32> = serde_json::from_value(w.clone()).context("ids")?;
        let got = loaded.tok.encode(s, true).map_err(|e| anyhow::anyhow!("{e}"))?;
        if got.get_ids() != w.as_slice() {
            return Ok(Some(Verification {
                passed: false,
                reference,
                max_error: None,
                detail: format!("{s:?}: got {:?}, reference {w:?}", got.get_ids()),
            }));
        }
    }
    Ok(Some(Verification::pass(format!("{reference} ({} sentences)", sentences.len()))))
}

/// GPT-2's reversible byte -> printable char table (`bytes_to_unicode` of
/// OpenAI's encoder.py): printable Latin-1 bytes map to themselves, the other
/// 68 to U+0100 onwards in byte order.
pub(crate) fn byte_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable =
            (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        table[b as usize] = if printable {
            b as char
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or('\0')
        };
    }
    table
}

/// `bytes` spelled in GPT-2's byte-level alphabet.
pub(crate) fn byte_level(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// GPT-2's pre-tokenizer (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
/// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`) on the `regex` crate, which has no
/// look-ahead: a whitespace run followed by a non-space gives back its last
/// character, exactly what the look-ahead alternative does. Byte ranges.
pub(crate) fn gpt2_split(text: &str) -> Vec<(usize, usize)> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^(?:'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+)")
            .expect("static regex")
    });
    let mut out = Vec::new();
    let mut p = 0;
    while p < text.len() {
        let Some(m) = re.find(&text[p..]) else {
            // Unreachable (`\s+` or `[^\s...]+` matches any char); keep progress.
            let c = text[p..].chars().next().map_or(1, char::len_utf8);
            out.push((p, p + c));
            p += c;
            continue;
        };
        let mut end = p + m.end();
        let piece = &text[p..end];
        if piece.chars().all(char::is_whitespace) && end < text.len() && piece.chars().count() > 1 {
            end -= piece.chars().next_back().map_or(0, char::len_utf8);
        }
        out.push((p, end));
        p = end;
    }
    out
}

/// Checks byte-level BPE offsets: consecutive tokens sharing one span (a
/// character split across tokens) concatenate to the span's bytes in the
/// byte-level alphabet, and every other token equals its own span.
pub(crate) fn check_byte_level_offsets(
    text: &str,
    tokens: &[String],
    offsets: &[(usize, usize)],
    table: &[char; 256],
) -> std::result::Result<(), String> {
    let mut i = 0;
    while i < tokens.len() {
        let span = offsets[i];
        let mut joined = String::new();
        let mut j = i;
        while j < tokens.len() && offsets[j] == span {
            joined.push_str(&tokens[j]);
            j += 1;
        }
        let (s, e) = span;
        let Some(slice) = text.get(s..e) else {
            return Err(format!(
                "token {i} {:?}: offsets {s}..{e} out of bounds or not on a char boundary",
                tokens[i]
            ));
        };
        // ASCII spans must be spelled exactly. A token holding part of a
        // multi-byte character gets the whole character's span, so there the
        // tokens must be a piece of the span's spelling.
        let want = byte_level(slice.as_bytes(), table);
        let ok = if slice.is_ascii() { joined == want } else { want.contains(&joined) };
        if !ok {
            return Err(format!("tokens {i}..{j} {joined:?} do not spell offsets {s}..{e} = {slice:?}"));
        }
        i = j;
    }
    Ok(())
}

/// Char offsets of `text` converted from byte offsets by walking its chars:
/// the independent check of `encode_char_offsets`.
pub(crate) fn bytes_to_char_offsets(text: &str, offsets: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut char_at = vec![0usize; text.len() + 1];
    let mut n = 0;
    for (b, _) in text.char_indices() {
        char_at[b] = n;
        n += 1;
    }
    char_at[text.len()] = n;
    offsets.iter().map(|&(s, e)| (char_at[s.min(text.len())], char_at[e.min(text.len())])).collect()
}

/// Round trip for byte-level BPE: decode(encode(x)) == x for every text.
pub(crate) fn round_trip(tok: &Tokenizer, texts: &[String]) -> Result<Verification> {
    for t in texts {
        let ids = tok.encode(t.as_str(), false).map_err(|e| anyhow::anyhow!("{e}"))?;
        let back = tok.decode(ids.get_ids(), false).map_err(|e| anyhow::anyhow!("{e}"))?;
        if &back != t {
            return Ok(Verification {
                passed: false,
                reference: "round trip decode(encode(text)) == text".into(),
                max_error: None,
                detail: format!("{t:?} came back as {back:?}"),
            });
        }
    }
    Ok(Verification::pass(format!("round trip decode(encode(text)) == text on {} texts", texts.len())))
}

/// What a SentencePiece-style decoder gives back for `text`: the normalized
/// text with metaspace "▁" read as spaces, less the one leading space the
/// decoder strips (the prepended "▁", or the first of the text's own).
pub(crate) fn sentencepiece_expected(tok: &Tokenizer, text: &str) -> Result<String> {
    let mut n = tokenizers::NormalizedString::from(text);
    if let Some(norm) = tok.get_normalizer() {
        tokenizers::Normalizer::normalize(norm, &mut n).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let spaced = n.get().replace('▁', " ");
    Ok(spaced.strip_prefix(' ').unwrap_or(&spaced).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_matches_gpt2_known_entries() {
        let t = byte_to_unicode();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], 'Ġ'); // U+0120: space is the 33rd non-printable byte
        assert_eq!(t[b'\n' as usize], 'Ċ'); // U+010A
        assert_eq!(t[0], '\u{100}');
        let mut all: Vec<char> = t.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 256, "the table is a bijection");
    }

    #[test]
    fn gpt2_split_handles_contractions_and_whitespace_runs() {
        let text = "Hello  world's 42\tx  \n";
        let pieces: Vec<&str> = gpt2_split(text).iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(pieces, ["Hello", " ", " world", "'s", " 42", "\t", "x", "  \n"]);
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn char_offsets_count_chars_not_bytes() {
        let text = "né ok";
        // "né" is bytes 0..3, " ok" bytes 3..6.
        assert_eq!(bytes_to_char_offsets(text, &[(0, 3), (3, 6)]), vec![(0, 2), (2, 5)]);
    }
}
