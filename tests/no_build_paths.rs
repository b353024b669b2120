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
    // The checkout: tfbench itself is always compiled through the wrapper.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut forbidden = vec![checkout.to_path_buf()];
    if let Ok(real) = checkout.canonicalize() {
        forbidden.push(real);
    }
    for p in &forbidden {
        let s = p.to_string_lossy();
        assert!(!contains(&bin, s.as_bytes()), "{exe} contains the build checkout's path {s}");
    }
    // $CARGO_HOME: cargo does not rebuild dependencies when the wrapper
    // changes (it is not part of their fingerprint), so a target folder
    // whose dependencies were compiled before it keeps their registry
    // paths until `cargo clean` (dependencies added since are remapped, so
    // both forms can be present); say so rather than fail the build.
    let Some(home) = cargo_home() else { return };
    let home = home.to_string_lossy();
    if contains(&bin, home.as_bytes()) {
        eprintln!(
            "SKIPPED (partly): {exe} still names {home}: its dependencies were compiled before \
             scripts/rustc-wrapper; `cargo clean` once removes them"
        );
    } else {
        // Remapped forms are what is left, proof the wrapper ran on them.
        assert!(contains(&bin, b"/cargo/registry/"), "no remapped registry path in {exe}");
    }
}
