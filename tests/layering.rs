//! The architecture's rules, checked over the source (issue 20): no suite
//! imports another suite, and the top-level modules form no import cycle.
//! The check reads `crate::` paths in every file of `src/` (use lines and
//! inline paths) and walks the module graph they draw.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `(file relative to src/, crate paths it names)`, test modules included
/// (a test importing another suite couples them just the same). Lines after
/// a `#[cfg(test)]` are marked so the module-cycle check can leave test code
/// out (tests may use fixtures from any stage).
fn crate_paths() -> Vec<(String, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let re = regex::Regex::new(r"crate::([a-z_0-9]+)(?:::([a-z_0-9]+))?").expect("regex");
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src").to_string_lossy().replace('\\', "/");
        let text = fs::read_to_string(&f).expect("read");
        let mut paths = Vec::new();
        let test_file =
            rel.ends_with("tests.rs") || rel.contains("/tests/") || rel.ends_with("calibration.rs");
        let mut in_tests = test_file;
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            in_tests |= line.trim() == "#[cfg(test)]";
            for c in re.captures_iter(line) {
                let second = c.get(2).map_or(String::new(), |m| format!("::{}", m.as_str()));
                let tag = if in_tests { "test:" } else { "" };
                paths.push(format!("{tag}{}{second}", &c[1]));
            }
        }
        out.push((rel, paths));
    }
    out
}

#[test]
fn no_suite_imports_another_suite() {
    let mut bad = Vec::new();
    for (file, paths) in crate_paths() {
        let Some(rest) = file.strip_prefix("suites/") else { continue };
        let Some((own, _)) = rest.split_once('/') else { continue };
        for p in paths {
            let p = p.trim_start_matches("test:");
            if let Some(other) = p.strip_prefix("suites::")
                && other != own
                && !matches!(other, "common" | "params")
                && [
                    "tensor",
                    "inference",
                    "optim",
                    "quant",
                    "memory",
                    "tokenizer",
                    "command",
                    "mobile",
                    "nn",
                    "sci",
                    "serving",
                ]
                .contains(&other)
            {
                bad.push(format!("src/{file} uses crate::{p}"));
            }
        }
    }
    assert!(bad.is_empty(), "suites importing other suites:\n{}", bad.join("\n"));
}

/// The top-level module of a file: `suites/tensor/mod.rs` -> `suites`.
fn module_of(file: &str) -> String {
    let mut parts = file.split('/');
    let top = parts.next().unwrap_or(file).trim_end_matches(".rs");
    match (top, parts.next()) {
        // The backend layer's devices are layers of their own: the CPU's
        // execution context sits below everything that splits work over
        // threads, a device backend above the utilities it uses.
        ("backend", Some(dir)) if BACKEND_LAYERS.contains(&dir) => format!("backend::{dir}"),
        _ => top.to_string(),
    }
}

/// Sub-folders of `src/backend/` that are layers of their own in the
/// cycle check.
const BACKEND_LAYERS: &[&str] = &["cpu", "cuda", "wasm", "webgpu"];

/// The layer a crate path (`backend::cpu`, `util`) names, as [`module_of`].
fn layer_of(path: &str) -> String {
    let mut parts = path.split("::");
    match (parts.next().unwrap_or(""), parts.next()) {
        ("backend", Some(dir)) if BACKEND_LAYERS.contains(&dir) => format!("backend::{dir}"),
        (top, _) => top.to_string(),
    }
}

#[test]
fn top_level_modules_form_no_cycle() {
    // Edges between top-level modules; a module's own files and the app and
    // main (which sit on top and may use anything) are not edges of interest.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, paths) in crate_paths() {
        let from = module_of(&file);
        if matches!(from.as_str(), "main" | "lib" | "app") {
            continue;
        }
        for p in paths.iter().filter(|p| !p.starts_with("test:")) {
            let to = layer_of(p);
            if to != from && !to.is_empty() {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    let nodes: Vec<String> = edges.keys().cloned().collect();
    for n in nodes {
        if state.get(&n).copied().unwrap_or(0) == 0 {
            let cycle = visit(&n, &edges, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle between top-level modules: {}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
}

/// The model runtime (`src/model/`, issue 46) stays self-contained, so that
/// it can sit behind a Cargo feature with one `#[cfg]` on its `mod` line:
/// outside its tests it imports only the layers below it (kernels, backends,
/// the workload vocabulary, utilities), and none of those imports it.
#[test]
fn the_model_runtime_uses_only_the_layers_below_it() {
    let below = ["kernels", "backend", "workload", "util", "data", "isa", "alloc", "stats", "units"];
    let mut bad = Vec::new();
    for (file, paths) in crate_paths() {
        let from = module_of(&file);
        for p in paths.iter().filter(|p| !p.starts_with("test:")) {
            let to = p.split("::").next().unwrap_or("");
            if from == "model" && to != "model" && !below.contains(&to) {
                bad.push(format!("src/{file} (model runtime) uses crate::{p}"));
            }
            if below.contains(&from.as_str()) && to == "model" {
                bad.push(format!("src/{file} (below the model runtime) uses crate::{p}"));
            }
        }
    }
    assert!(bad.is_empty(), "model runtime layering:\n{}", bad.join("\n"));
}

/// Device code lives in the backend layer (issue 46): no file under
/// `src/suites/` names `cudarc` or `crate::backend::cuda` (comments
/// included); a suite describes its work and asks the case's backend
/// (`crate::backend::ops`), or the model runtime, whose per-backend
/// forward passes live in `src/model/`.
#[test]
fn suites_name_no_device_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("suites"), &mut files);
    let mut bad = Vec::new();
    let mut checked = 0;
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src").to_string_lossy().replace('\\', "/");
        checked += 1;
        let text = fs::read_to_string(&f).expect("read");
        for (i, line) in text.lines().enumerate() {
            if line.contains("cudarc") || line.contains("backend::cuda") {
                bad.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(checked > 20, "only {checked} suite files read");
    assert!(bad.is_empty(), "suites naming a device's API (move it under src/backend/):\n{}", bad.join("\n"));
}
