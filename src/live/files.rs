//! URL paths to files of the store, and nothing else.
//!
//! The dashboard offers the stored baselines (`/store/NAME.json`) and
//! history (`/history/MACHINE.jsonl`) for download. A request path is
//! percent-decoded once and then refused unless every segment is a plain
//! name: no `..` or `.` (however encoded: decoding happens before the
//! check), no hidden names (temporary files start with a dot), no empty
//! segment (`//etc/passwd`), no backslash or NUL. What is left is joined to
//! the root and canonicalized, and must still lie inside the canonical root:
//! a symlink in the store that points outside is refused too.

use std::path::{Path, PathBuf};

/// Why a path is not served (the server answers 404 for all of them, so a
/// client learns nothing about what exists outside the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Bad percent-encoding or not UTF-8 after decoding.
    BadEncoding,
    /// A segment that is empty, `.`, `..`, hidden, or holds `\` or NUL.
    BadSegment,
    /// Not a `.json` or `.jsonl` file.
    NotData,
    /// Missing, not a regular file, or (after symlinks) outside the root.
    NotInStore,
}

/// `raw` (the part of the URL path after the route's prefix, still
/// percent-encoded, without the query) as a file inside `root`.
pub fn resolve_in_root(root: &Path, raw: &str) -> Result<PathBuf, Refusal> {
    let decoded = percent_decode(raw).ok_or(Refusal::BadEncoding)?;
    let mut rel = PathBuf::new();
    for seg in decoded.split('/') {
        if seg.is_empty() || seg.starts_with('.') || seg.contains(['\\', '\0']) {
            return Err(Refusal::BadSegment);
        }
        rel.push(seg);
    }
    let is_data = rel.extension().is_some_and(|e| e == "json" || e == "jsonl");
    if !is_data {
        return Err(Refusal::NotData);
    }
    let root = root.canonicalize().map_err(|_| Refusal::NotInStore)?;
    let file = root.join(&rel).canonicalize().map_err(|_| Refusal::NotInStore)?;
    if !file.starts_with(&root) || !file.is_file() {
        return Err(Refusal::NotInStore);
    }
    Ok(file)
}

/// `%XX` sequences decoded; `None` for a malformed one or non-UTF-8 bytes.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("tfbench-live-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("store");
        std::fs::create_dir_all(root.join("history")).unwrap();
        std::fs::write(root.join("b1.json"), "{}").unwrap();
        std::fs::write(root.join("history/m.jsonl"), "{}").unwrap();
        std::fs::write(root.join(".secret.json"), "{}").unwrap();
        std::fs::write(base.join("outside.json"), "{}").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(base.join("outside.json"), root.join("link.json")).unwrap();
        (base, root)
    }

    #[test]
    fn store_files_resolve_and_nothing_else_does() {
        let (base, root) = store();
        assert!(resolve_in_root(&root, "b1.json").unwrap().ends_with("store/b1.json"));
        assert!(resolve_in_root(&root, "history/m.jsonl").is_ok());
        assert!(resolve_in_root(&root, "b%31.json").is_ok(), "plain encoding is fine");
        for (raw, why) in [
            ("../outside.json", Refusal::BadSegment),
            ("%2e%2e/outside.json", Refusal::BadSegment),
            ("%2E%2E%2Foutside.json", Refusal::BadSegment),
            ("history/../../outside.json", Refusal::BadSegment),
            ("/etc/passwd", Refusal::BadSegment),
            ("%2fetc%2fpasswd", Refusal::BadSegment),
            ("..%5coutside.json", Refusal::BadSegment),
            (".secret.json", Refusal::BadSegment),
            ("b1.json%00", Refusal::BadSegment),
            ("%zz.json", Refusal::BadEncoding),
            ("%ff.json", Refusal::BadEncoding),
            ("history", Refusal::NotData),
            ("missing.json", Refusal::NotInStore),
        ] {
            assert_eq!(resolve_in_root(&root, raw), Err(why), "{raw}");
        }
        #[cfg(unix)]
        assert_eq!(resolve_in_root(&root, "link.json"), Err(Refusal::NotInStore), "symlink out of the store");
        let _ = std::fs::remove_dir_all(base);
    }
}
