//! `run --model` on the LLaMA family's other GGUF architectures (issue 51):
//! the tiny seeded qwen2, qwen3, phi3 and gemma3 files of
//! `scripts/make_arch_models.py` (real tokenizers, `.data/arch/`) load,
//! prefill and generate, each case verified against tfbench's f64
//! reference, on this CPU and under the AVX2 cap; an architecture still not
//! run is refused by name. Their logits against llama.cpp's are the unit
//! tests in `src/suites/inference/llamacpp_tests.rs`.

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// The data folder's `arch/`, or `None` (saying so) without the tiny files.
fn arch_data() -> Option<PathBuf> {
    let data = std::env::var_os("TFBENCH_DATA_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".data"), PathBuf::from);
    let arch = data.join("arch");
    if arch.join("gemma3-tiny.q5_0.gguf").is_file() {
        Some(arch)
    } else {
        eprintln!(
            "SKIPPED: {} has no gemma3-tiny.q5_0.gguf; run `bash scripts/fetch-test-data.sh`",
            arch.display()
        );
        None
    }
}

#[test]
fn qwen2_qwen3_phi3_and_gemma3_files_run_verified_through_model() {
    let Some(arch) = arch_data() else { return };
    let files = ["qwen2-tiny.f32.gguf", "qwen3-tiny.f32.gguf", "phi3-tiny.f32.gguf", "gemma3-tiny.q5_0.gguf"];
    for isa in [None, Some("avx2")] {
        for rel in files {
            let p = arch.join(rel);
            let args = [
                "run",
                "--model",
                p.to_str().unwrap(),
                "--tests",
                "load",
                "-p",
                "16",
                "-n",
                "8",
                "-r",
                "2",
                "--warm-up-time",
                "0.01",
                "--measurement-time",
                "0.1",
                "--no-probe",
                "--threads",
                "2",
                "--format",
                "json",
            ];
            let r = match isa {
                Some(cap) => tfbench_env(&[("TFBENCH_MAX_ISA", cap)], &args),
                None => tfbench(&args),
            };
            assert_eq!(r.code, 0, "{rel} (cap {isa:?}): {}", r.stderr);
            let v = json(&r);
            let cases = v["cases"].as_array().unwrap();
            assert_eq!(cases.len(), 3, "{rel}: load, pp16, tg8");
            for c in cases {
                let id = c["id"].as_str().unwrap();
                assert_eq!(c["status"]["state"], "ok", "{id} (cap {isa:?}): {}", c["status"]);
                let reference = c["verification"]["reference"].as_str().unwrap_or("");
                assert!(reference.contains("f64"), "{id}: {reference}");
                assert!(metric(c, "params").unwrap() > 0.0, "{id}");
            }
        }
    }
}

/// A `mistral3` file (an architecture tfbench does not run) is refused by
/// name, with the list of those it runs, and nothing is written.
#[test]
fn an_architecture_not_run_is_refused_by_name() {
    let Some(arch) = arch_data() else { return };
    let mut bytes = std::fs::read(arch.join("phi3-tiny.f32.gguf")).unwrap();
    // `general.architecture` is the first key the gguf writer stores:
    // rewrite the value's 4 bytes `phi3` (the same length as `phi3` keeps
    // every offset) to `phi4`.
    let at = bytes.windows(4).position(|w| w == b"phi3").unwrap();
    bytes[at..at + 4].copy_from_slice(b"phi4");
    let dir = scratch("model-archs-refused");
    let path = dir.join("phi4.gguf");
    std::fs::write(&path, bytes).unwrap();
    let out = dir.join("out.json");
    let r = tfbench(&["run", "--no-probe", "--model", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_usage_error(&r, &["architecture `phi4`", "gemma3", "qwen3", "phi3"]);
    assert!(!out.exists(), "nothing is written");
}
