//! The history files: `<dir>/<fingerprint>.jsonl`, one [`HistoryEntry`] per
//! line, oldest first.
//!
//! Appending never rewrites the file: a line is added with one `write_all`
//! on a file opened in append mode, so runs recorded concurrently (several
//! CI jobs sharing a folder) each land as a whole line. Loading tolerates
//! damage: a line that does not parse is skipped with a warning naming the
//! file and line, so one bad line never hides the rest of a history.

use super::{HISTORY_SCHEMA_VERSION, HistoryEntry, entry_from_report};
use crate::results::RunReport;
use anyhow::{Context, Result, bail};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Extension of the history files.
const EXT: &str = "jsonl";

/// A machine's history as loaded, with what had to be skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The runs, in file (recording) order.
    pub entries: Vec<HistoryEntry>,
    /// One message per skipped line: `file:line: reason`.
    pub warnings: Vec<String>,
}

/// A folder of per-machine history files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryStore {
    dir: PathBuf,
}

impl HistoryStore {
    /// A store in `dir` (usually [`super::DEFAULT_DIR`]); nothing is touched
    /// until the first append.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The folder of the history files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The history file of the machine `fingerprint`. Errors when the
    /// fingerprint is not a plain name (letters, digits, `-`, `_`, `.`, not
    /// starting with `.`), so it can never point outside the folder.
    pub fn path_for(&self, fingerprint: &str) -> Result<PathBuf> {
        let plain = fingerprint.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if fingerprint.is_empty() || fingerprint.starts_with('.') || !plain {
            bail!("invalid machine fingerprint {fingerprint:?}: expected letters, digits, '-', '_' or '.'");
        }
        Ok(self.dir.join(format!("{fingerprint}.{EXT}")))
    }

    /// Appends the run `r` to the history of the machine it ran on (its
    /// environment's fingerprint) and returns the file's path. Creates the
    /// folder and the file when needed.
    pub fn append(&self, r: &RunReport) -> Result<PathBuf> {
        self.append_entry(&r.environment.fingerprint(), &entry_from_report(r))
    }

    /// Appends `entry` to the history of `fingerprint`; returns the path.
    pub fn append_entry(&self, fingerprint: &str, entry: &HistoryEntry) -> Result<PathBuf> {
        let path = self.path_for(fingerprint)?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create history folder {}", self.dir.display()))?;
        let mut line = serde_json::to_vec(entry).context("cannot serialize history entry")?;
        line.push(b'\n');
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new().read(true).append(true).create(true).open(&path)?;
            // A line cut short by a crash must not swallow this one: start on
            // a fresh line. (Racing appenders at worst add a blank line,
            // which loading ignores.)
            let mut buf = Vec::with_capacity(line.len() + 1);
            if !ends_with_newline(&mut file)? {
                buf.push(b'\n');
            }
            buf.extend_from_slice(&line);
            // One write_all of the whole line: with O_APPEND each write goes
            // to the end of the file atomically, so lines never interleave.
            file.write_all(&buf)
        };
        write().with_context(|| format!("cannot append to history file {}", path.display()))?;
        Ok(path)
    }

    /// The history of `fingerprint`. A missing file is an empty history; a
    /// line that does not parse (or comes from a newer layout) is skipped
    /// with a warning naming the file and line number. Errors only when the
    /// file exists but cannot be read.
    pub fn load(&self, fingerprint: &str) -> Result<History> {
        let path = self.path_for(fingerprint)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(History::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read history file {}", path.display())),
        };
        Ok(parse_lines(&path, &bytes))
    }

    /// Fingerprints of the machines with a history file here, sorted. A
    /// missing folder has none.
    pub fn machines(&self) -> Result<Vec<String>> {
        let read_dir = match std::fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot list history folder {}", self.dir.display()));
            }
        };
        let mut machines = Vec::new();
        for item in read_dir {
            let item = item.with_context(|| format!("cannot list history folder {}", self.dir.display()))?;
            let path = item.path();
            if path.extension().and_then(|e| e.to_str()) != Some(EXT) || !path.is_file() {
                continue;
            }
            // Only names `path_for` would accept: other files are not ours.
            match path.file_stem().and_then(|s| s.to_str()) {
                Some(stem) if self.path_for(stem).is_ok() => machines.push(stem.to_string()),
                _ => {}
            }
        }
        machines.sort();
        Ok(machines)
    }
}

/// True for an empty file or one whose last byte is `\n`.
fn ends_with_newline(file: &mut std::fs::File) -> std::io::Result<bool> {
    if file.metadata()?.len() == 0 {
        return Ok(true);
    }
    // Reads follow the cursor; appends always go to the end regardless.
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Parses a history file's bytes line by line; blank lines are ignored.
fn parse_lines(path: &Path, bytes: &[u8]) -> History {
    let mut history = History::default();
    for (number, raw) in bytes.split(|&b| b == b'\n').enumerate().map(|(i, l)| (i + 1, l)) {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = std::str::from_utf8(raw)
            .map_err(|e| format!("not UTF-8 ({e})"))
            .and_then(|text| serde_json::from_str::<HistoryEntry>(text).map_err(|e| e.to_string()));
        let problem = match parsed {
            Ok(entry) if entry.schema_version <= HISTORY_SCHEMA_VERSION => {
                history.entries.push(entry);
                continue;
            }
            Ok(entry) => format!(
                "schema version {} is newer than this tfbench reads ({HISTORY_SCHEMA_VERSION})",
                entry.schema_version
            ),
            Err(e) => e,
        };
        history.warnings.push(format!("{}:{number}: skipped history line: {problem}", path.display()));
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty folder under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let unique = format!(
                "tfbench-history-{tag}-{}-{nanos}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let dir = std::env::temp_dir().join(unique);
            std::fs::create_dir_all(&dir).expect("temp dir");
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn report_at(started_at: &str) -> RunReport {
        let mut r = crate::report::fixture();
        r.started_at = started_at.into();
        r
    }

    #[test]
    fn append_and_load_round_trip_in_order() {
        let tmp = TempDir::new("roundtrip");
        let store = HistoryStore::new(tmp.0.join("nested/history"));
        let times = ["2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z", "2025-01-03T00:00:00Z"];
        let mut path = PathBuf::new();
        for t in times {
            path = store.append(&report_at(t)).expect("append");
        }
        let fingerprint = report_at(times[0]).environment.fingerprint();
        assert_eq!(path, store.dir().join(format!("{fingerprint}.jsonl")));
        let history = store.load(&fingerprint).expect("load");
        assert!(history.warnings.is_empty(), "{:?}", history.warnings);
        let recorded: Vec<&str> = history.entries.iter().map(|e| e.recorded_at.as_str()).collect();
        assert_eq!(recorded, times);
        assert_eq!(history.entries[0], entry_from_report(&report_at(times[0])), "bit-exact round trip");
        assert_eq!(store.machines().expect("machines"), [fingerprint]);
    }

    #[test]
    fn missing_files_and_folders_are_empty() {
        let tmp = TempDir::new("missing");
        let store = HistoryStore::new(tmp.0.join("absent"));
        assert_eq!(store.load("0123abcd").expect("load"), History::default());
        assert!(store.machines().expect("machines").is_empty());
    }

    #[test]
    fn bad_fingerprints_are_rejected() {
        let store = HistoryStore::new("unused");
        for bad in ["", "../etc", "a/b", ".hidden", "x y"] {
            let err = store.load(bad).expect_err(bad).to_string();
            assert!(err.contains("invalid machine fingerprint"), "{err}");
        }
    }

    #[test]
    fn corrupt_lines_are_skipped_with_file_and_line() {
        let tmp = TempDir::new("corrupt");
        let store = HistoryStore::new(&tmp.0);
        store.append_entry("m1", &entry_from_report(&report_at("2025-01-01T00:00:00Z"))).expect("append");
        let path = store.path_for("m1").expect("path");
        // Line 2: garbage; line 3: blank; line 4: a newer layout; then a
        // line cut short by a crash, which the next append must not join.
        let newer = serde_json::to_string(&HistoryEntry {
            schema_version: HISTORY_SCHEMA_VERSION + 1,
            ..entry_from_report(&report_at("x"))
        })
        .expect("json");
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str(&format!("{{not json\n\n{newer}\n{{\"schema_version\":1,\"rec"));
        std::fs::write(&path, text).expect("write");
        store.append_entry("m1", &entry_from_report(&report_at("2025-01-09T00:00:00Z"))).expect("append");

        let history = store.load("m1").expect("load");
        let recorded: Vec<&str> = history.entries.iter().map(|e| e.recorded_at.as_str()).collect();
        assert_eq!(recorded, ["2025-01-01T00:00:00Z", "2025-01-09T00:00:00Z"]);
        assert_eq!(history.warnings.len(), 3, "{:?}", history.warnings);
        let file = path.display().to_string();
        assert!(history.warnings[0].starts_with(&format!("{file}:2: ")), "{}", history.warnings[0]);
        assert!(history.warnings[1].starts_with(&format!("{file}:4: ")), "{}", history.warnings[1]);
        assert!(history.warnings[1].contains("newer"), "{}", history.warnings[1]);
        assert!(history.warnings[2].starts_with(&format!("{file}:5: ")), "{}", history.warnings[2]);
    }

    #[test]
    fn concurrent_appends_each_write_a_whole_line() {
        let tmp = TempDir::new("concurrent");
        let store = HistoryStore::new(&tmp.0);
        let entry = entry_from_report(&crate::report::fixture());
        std::thread::scope(|s| {
            for i in 0..8 {
                let (store, mut entry) = (&store, entry.clone());
                s.spawn(move || {
                    entry.git_revision = format!("rev{i}");
                    store.append_entry("shared", &entry).expect("append");
                });
            }
        });
        let text = std::fs::read_to_string(store.path_for("shared").expect("path")).expect("read");
        // A racing appender may see another's line half-written (its last
        // byte not yet a newline) and start on a fresh line: at worst a blank
        // line, which loading ignores. Every line with content is whole.
        assert_eq!(text.lines().filter(|l| !l.trim().is_empty()).count(), 8, "{text}");
        let history = store.load("shared").expect("load");
        assert!(history.warnings.is_empty(), "{:?}", history.warnings);
        let mut revs: Vec<String> = history.entries.into_iter().map(|e| e.git_revision).collect();
        revs.sort();
        assert_eq!(revs, (0..8).map(|i| format!("rev{i}")).collect::<Vec<_>>());
    }
}
