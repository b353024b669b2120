//! Where the real input files live (MiniLM weights, vocabularies, the King
//! James Bible, OpenBLAS), found at run time, never at build time: a binary
//! copied to another machine or installed in an image must not look in the
//! folder it was compiled in.
//!
//! Places, first match wins per file:
//!
//! 1. `--data-dir DIR` ([`set_flag_dir`]), else `$TFBENCH_DATA_DIR`: only
//!    that folder when given, so a test can hide the data by pointing it
//!    at an empty or missing folder;
//! 2. `data/` beside the executable, then `../share/tfbench/data` relative
//!    to it (an installed `bin/` + `share/` layout);
//! 3. the XDG data directory, `$XDG_DATA_HOME/tfbench` (default
//!    `~/.local/share/tfbench`);
//! 4. the `.data/` folder of a tfbench source checkout, only when the
//!    working directory is inside one (found by walking up from it to a
//!    `Cargo.toml` whose package is `tfbench`), which is where
//!    `scripts/fetch-test-data.sh` puts the files.
//!
//! `tfbench sysinfo` shows every place and whether it exists.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the data folder.
pub const ENV: &str = "TFBENCH_DATA_DIR";

static FLAG_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Records `--data-dir` (the binary calls this once, before anything runs).
/// An error when it is not a folder, naming the flag: a typed path that
/// does not exist is a mistake, not a request to skip every data case.
pub fn set_flag_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("--data-dir {}: no such folder", dir.display()));
    }
    // A second call keeps the first value; the binary calls it once.
    let _ = FLAG_DIR.set(dir.to_path_buf());
    Ok(())
}

/// Why a place is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--data-dir`.
    Flag,
    /// `$TFBENCH_DATA_DIR`.
    Env,
    /// `data/` beside the executable.
    BesideExe,
    /// `../share/tfbench/data` relative to the executable.
    InstalledShare,
    /// `$XDG_DATA_HOME/tfbench` or `~/.local/share/tfbench`.
    Xdg,
    /// `.data/` of the tfbench checkout the working directory is in.
    Checkout,
}

impl Source {
    /// How sysinfo and skip reasons name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Flag => "--data-dir",
            Self::Env => "TFBENCH_DATA_DIR",
            Self::BesideExe => "beside the executable",
            Self::InstalledShare => "installed share/",
            Self::Xdg => "XDG data directory",
            Self::Checkout => "source checkout (working directory)",
        }
    }
}

/// One place searched for data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The folder.
    pub dir: PathBuf,
    /// Why it is searched.
    pub source: Source,
    /// Whether it exists as a folder now.
    pub exists: bool,
}

/// The places searched, in order.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// Every place, first match wins.
    pub places: Vec<Place>,
}

/// The places this process searches now (the flag, the environment, the
/// executable's location and the working directory are read each call,
/// which costs a few `stat`s; cases call it while they are prepared).
pub fn lookup() -> Lookup {
    let explicit = FLAG_DIR
        .get()
        .map(|d| (d.clone(), Source::Flag))
        .or_else(|| std::env::var_os(ENV).filter(|v| !v.is_empty()).map(|v| (PathBuf::from(v), Source::Env)));
    let candidates: Vec<(PathBuf, Source)> = match explicit {
        Some(one) => vec![one],
        None => {
            let mut c = Vec::new();
            if let Some(bin) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
                c.push((bin.join("data"), Source::BesideExe));
                if let Some(prefix) = bin.parent() {
                    c.push((prefix.join("share/tfbench/data"), Source::InstalledShare));
                }
            }
            if let Some(x) = xdg_data_home() {
                c.push((x.join("tfbench"), Source::Xdg));
            }
            if let Some(root) = std::env::current_dir().ok().and_then(|d| checkout_root(&d)) {
                c.push((root.join(".data"), Source::Checkout));
            }
            c
        }
    };
    Lookup {
        places: candidates
            .into_iter()
            .map(|(dir, source)| Place { exists: dir.is_dir(), dir, source })
            .collect(),
    }
}

/// `$XDG_DATA_HOME` when set to an absolute path (the XDG spec says to
/// ignore a relative one), else `$HOME/.local/share`.
fn xdg_data_home() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(x);
    }
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/share"))
}

/// The root of the tfbench source checkout containing `dir`: the nearest
/// folder at or above it with a `Cargo.toml` whose `[package] name` is
/// `tfbench` (a workspace or another crate's manifest does not count).
pub fn checkout_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| is_tfbench_manifest(&d.join("Cargo.toml"))).map(Path::to_path_buf)
}

fn is_tfbench_manifest(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(table) = text.parse::<toml::Table>() else { return false };
    table.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str()) == Some("tfbench")
}

impl Lookup {
    /// The first place holding `rel` (a file or folder, relative to a data
    /// folder), or why none does: where it looked, for a skip reason.
    pub fn find(&self, rel: &str) -> Result<PathBuf, String> {
        if let Some(p) = self.places.iter().filter(|p| p.exists).map(|p| p.dir.join(rel)).find(|p| p.exists())
        {
            return Ok(p);
        }
        Err(format!("{rel} is not in the data folder ({}); {HOW}", self.searched()))
    }

    /// The places, as "DIR (why)" joined for a message; missing ones marked.
    pub fn searched(&self) -> String {
        if self.places.is_empty() {
            return "no place to look".to_string();
        }
        let places: Vec<String> = self
            .places
            .iter()
            .map(|p| {
                let missing = if p.exists { "" } else { ", absent" };
                format!("{} [{}{missing}]", p.dir.display(), p.source.label())
            })
            .collect();
        format!("looked in {}", places.join(", "))
    }

    /// One line per place for `sysinfo`: the folder, why, and whether it
    /// exists with which of the known files it holds.
    pub fn describe(&self) -> Vec<String> {
        if self.places.is_empty() {
            return vec!["no place to look (no executable path, HOME or checkout)".to_string()];
        }
        self.places
            .iter()
            .map(|p| {
                let what = if !p.exists {
                    "absent".to_string()
                } else {
                    let have: Vec<&str> = KNOWN.iter().copied().filter(|k| p.dir.join(k).exists()).collect();
                    if have.is_empty() {
                        "exists, none of the known files".to_string()
                    } else {
                        have.join(" ")
                    }
                };
                format!("{} [{}]: {what}", p.dir.display(), p.source.label())
            })
            .collect()
    }
}

/// What a skip reason suggests when a file is missing.
const HOW: &str =
    "`bash scripts/fetch-test-data.sh` fills a checkout's .data/; or set --data-dir / TFBENCH_DATA_DIR";

/// The entries `scripts/fetch-test-data.sh` puts in the data folder.
pub const KNOWN: &[&str] = &["minilm", "gpt2", "llama2", "kjv.txt", "openblas", "smollm2", "llama-vocab"];

/// [`lookup`]`().find(rel)`.
pub fn find(rel: &str) -> Result<PathBuf, String> {
    lookup().find(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(dir: &Path, source: Source) -> Place {
        Place { exists: dir.is_dir(), dir: dir.to_path_buf(), source }
    }

    #[test]
    fn first_place_holding_the_file_wins_and_misses_say_where_it_looked() {
        let root = std::env::temp_dir().join(format!("tfbench-data-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("gpt2")).unwrap();
        std::fs::write(b.join("kjv.txt"), "x").unwrap();
        std::fs::write(a.join("kjv.txt"), "y").unwrap();
        let l = Lookup {
            places: vec![
                place(&root.join("missing"), Source::BesideExe),
                place(&a, Source::Xdg),
                place(&b, Source::Checkout),
            ],
        };
        assert_eq!(l.find("kjv.txt"), Ok(a.join("kjv.txt")));
        assert_eq!(l.find("gpt2"), Ok(b.join("gpt2")));
        let e = l.find("minilm/model.safetensors").unwrap_err();
        assert!(e.starts_with("minilm/model.safetensors is not in the data folder"), "{e}");
        assert!(
            e.contains(&format!("{} [beside the executable, absent]", root.join("missing").display())),
            "{e}"
        );
        assert!(e.contains("TFBENCH_DATA_DIR"), "{e}");
        let d = l.describe();
        assert!(
            d[0].ends_with("absent") && d[1].ends_with("kjv.txt") && d[2].ends_with("gpt2 kjv.txt"),
            "{d:?}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn checkout_is_found_from_below_its_root_by_package_name() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(checkout_root(&here.join("src/suites")).as_deref(), Some(here));
        let root = std::env::temp_dir().join(format!("tfbench-checkout-{}", std::process::id()));
        std::fs::create_dir_all(root.join("x/y")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"other\"\n").unwrap();
        assert_eq!(checkout_root(&root.join("x/y")), None, "another crate is no tfbench checkout");
        std::fs::write(root.join("x/Cargo.toml"), "[package]\nname = \"tfbench\"\n").unwrap();
        assert_eq!(checkout_root(&root.join("x/y")), Some(root.join("x")));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn unit_tests_search_the_checkout_they_run_in() {
        // cargo runs unit tests in the package root, so the checkout's
        // .data/ is among the places unless TFBENCH_DATA_DIR replaces them.
        let l = lookup();
        if std::env::var_os(ENV).is_some_and(|v| !v.is_empty()) {
            assert_eq!(l.places.len(), 1);
            assert_eq!(l.places[0].source, Source::Env);
        } else {
            let last = l.places.last().expect("places");
            assert_eq!(last.source, Source::Checkout);
            assert_eq!(last.dir, Path::new(env!("CARGO_MANIFEST_DIR")).join(".data"));
        }
    }
}
