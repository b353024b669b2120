//! The release binary carries no path of the machine that built it (issue
//! 21): data are found at run time (`src/data.rs`), and
//! `scripts/rustc-wrapper` (named in `.cargo/config.toml`) remaps this
//! checkout and `$CARGO_HOME` out of debug info and panic locations.
//! `env!("CARGO_MANIFEST_DIR")` is fine here: this test is not shipped.

use std::path::{Path, PathBuf};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `$CARGO_HOME` as cargo resolves it (default `~/.cargo`).
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
}

#[test]
fn the_binary_names_neither_the_checkout_nor_cargo_home() {
    // A RUSTC_WRAPPER from the environment (sccache, ...) replaces the
    // remapping wrapper, so the paths are then expected to be there.
    if let Some(w) = option_env!("RUSTC_WRAPPER").filter(|w| !w.is_empty() && !w.ends_with("rustc-wrapper")) {
        eprintln!("SKIPPED: built with RUSTC_WRAPPER={w}, which replaces scripts/rustc-wrapper");
        return;
    }
    let exe = env!("CARGO_BIN_EXE_tfbench");
    let bin = std::fs::read(exe).expect("read the built binary");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut forbidden = vec![checkout.to_path_buf()];
    if let Ok(real) = checkout.canonicalize() {
        forbidden.push(real);
    }
    forbidden.extend(cargo_home());
    for p in &forbidden {
        let s = p.to_string_lossy();
        assert!(!contains(&bin, s.as_bytes()), "{exe} contains the build machine's path {s}");
    }
    // The remapped forms are what is left, proof the wrapper ran (a binary
    // with no dependency paths at all would also pass the check above).
    assert!(contains(&bin, b"/cargo/registry/"), "no remapped registry path in {exe}");
}
