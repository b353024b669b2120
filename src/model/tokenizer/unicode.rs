//! llama.cpp's Unicode tables (build 0c1e570, `src/unicode-data.cpp`, MIT),
//! copied into `llama_unicode.bin` by `scripts/llama_unicode_tables.py`: the
//! code point classes, lowercase map and one-to-one "NFD" its WordPiece
//! tokenizer normalizes with. The platform's or a crate's Unicode version
//! would classify newer characters (emoji, recent scripts) differently and
//! give other ids; these are llama.cpp's own.

use anyhow::{Result, bail};
use std::sync::OnceLock;

/// `\p{M}`.
pub const ACCENT_MARK: u32 = 0x0010;
/// `\p{P}`.
pub const PUNCTUATION: u32 = 0x0020;
/// `\p{S}`.
pub const SYMBOL: u32 = 0x0040;
/// `\p{C}` (control, format, private use, surrogate, unassigned).
pub const CONTROL: u32 = 0x0080;
/// `\s` (llama.cpp's whitespace set).
pub const WHITESPACE: u32 = 0x0100;

const BIN: &[u8] = include_bytes!("llama_unicode.bin");

/// The four tables.
pub struct Tables {
    flags: Vec<(u32, u32)>,
    whitespace: Vec<u32>,
    lower: Vec<(u32, u32)>,
    nfd: Vec<(u32, u32, u32)>,
}

fn parse(b: &[u8]) -> Result<Tables> {
    let mut words = b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    if !b.len().is_multiple_of(4) || b.get(..4) != Some(b"LLUT".as_slice()) {
        bail!("llama_unicode.bin: not a table file");
    }
    words.next();
    if words.next() != Some(1) {
        bail!("llama_unicode.bin: unknown version");
    }
    let mut rows = |width: usize| -> Result<Vec<Vec<u32>>> {
        let n = words.next().unwrap_or(0) as usize;
        let v: Vec<Vec<u32>> = (0..n).map(|_| (0..width).filter_map(|_| words.next()).collect()).collect();
        if v.iter().any(|r| r.len() != width) {
            bail!("llama_unicode.bin: truncated");
        }
        Ok(v)
    };
    let flags = rows(2)?.into_iter().map(|r| (r[0], r[1])).collect::<Vec<_>>();
    let mut whitespace = rows(1)?.into_iter().map(|r| r[0]).collect::<Vec<_>>();
    whitespace.sort_unstable();
    let lower = rows(2)?.into_iter().map(|r| (r[0], r[1])).collect();
    let nfd = rows(3)?.into_iter().map(|r| (r[0], r[1], r[2])).collect();
    if flags.first().map(|f| f.0) != Some(0) {
        bail!("llama_unicode.bin: flags do not start at 0");
    }
    Ok(Tables { flags, whitespace, lower, nfd })
}

/// The tables, parsed once.
pub fn tables() -> Result<&'static Tables> {
    static T: OnceLock<std::result::Result<Tables, String>> = OnceLock::new();
    T.get_or_init(|| parse(BIN).map_err(|e| e.to_string())).as_ref().map_err(|e| anyhow::anyhow!("{e}"))
}

impl Tables {
    /// llama.cpp's `unicode_cpt_flags_from_cpt` bits (the constants above).
    pub fn flags(&self, cpt: u32) -> u32 {
        // The range holding cpt starts at the last start <= cpt.
        let i = self.flags.partition_point(|f| f.0 <= cpt);
        let f = if i == 0 || cpt > 0x10FFFF { 0x0001 } else { self.flags[i - 1].1 };
        f | if self.whitespace.binary_search(&cpt).is_ok() { WHITESPACE } else { 0 }
    }

    /// `unicode_tolower`: one code point to one (itself when unmapped).
    pub fn lower(&self, cpt: u32) -> u32 {
        self.lower.binary_search_by_key(&cpt, |p| p.0).map_or(cpt, |i| self.lower[i].1)
    }

    /// `unicode_cpts_normalize_nfd` on one code point: the first code point
    /// of its decomposition (`é` -> `e`), itself when it has none.
    pub fn nfd(&self, cpt: u32) -> u32 {
        let i = self.nfd.partition_point(|r| r.0 <= cpt);
        match i.checked_sub(1).map(|k| self.nfd[k]) {
            Some((first, last, to)) if first <= cpt && cpt <= last => to,
            _ => cpt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_and_classify_as_llama_cpp() {
        let t = tables().unwrap();
        assert!(t.flags(' ' as u32) & WHITESPACE != 0 && t.flags(0x3000) & WHITESPACE != 0);
        assert!(t.flags('!' as u32) & PUNCTUATION != 0 && t.flags('$' as u32) & SYMBOL != 0);
        assert!(t.flags(0x0301) & ACCENT_MARK != 0, "combining acute");
        assert!(t.flags(0x200D) & CONTROL != 0, "zero-width joiner is \\p{{Cf}}");
        assert_eq!(t.flags('a' as u32) & (CONTROL | PUNCTUATION | WHITESPACE), 0);
        assert_eq!(
            (t.lower('A' as u32), t.lower('a' as u32), t.lower(0x0391)),
            ('a' as u32, 'a' as u32, 0x03B1)
        );
        assert_eq!((t.nfd(0xE9), t.nfd('e' as u32), t.nfd(0xC5)), ('e' as u32, 'e' as u32, 'A' as u32));
        assert!(parse(&BIN[..BIN.len() - 4]).is_err() && parse(b"LLUT").is_err());
    }
}
