//! `run --model` beyond `llama` GGUF files: the `gpt2` and `bert`
//! architectures from GGUF, Hugging Face directories, and the directory's
//! bad inputs (exit 2 naming the cause, nothing written).

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// A minimal safetensors file of F32 tensors (name, shape), zero-filled.
fn safetensors(path: &Path, tensors: &[(&str, &[usize])]) {
    let (mut header, mut off) = (Vec::new(), 0usize);
    for (name, shape) in tensors {
        let n: usize = shape.iter().product::<usize>() * 4;
        header.push(format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            off + n
        ));
        off += n;
    }
    let mut h = format!("{{{}}}", header.join(",")).into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    bytes.resize(bytes.len() + off, 0);
    std::fs::write(path, bytes).expect("write safetensors");
}

/// A bad directory: its name, its config.json, its tensors, what the error says.
type Bad<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, &'a [usize])], &'a [&'a str]);

#[test]
fn a_bad_hugging_face_directory_is_refused_naming_the_cause() {
    let root = scratch("model-hf-errors");
    let out = root.join("out.json");
    let out = out.to_str().expect("utf-8 path");
    let gpt2 = r#"{"model_type": "gpt2", "n_layer": 1, "n_embd": 4, "n_head": 1, "vocab_size": 8, "n_positions": 4}"#;
    let cases: [Bad; 4] = [
        ("empty", None, &[], &["has no config.json", "config.json and *.safetensors"]),
        ("no-weights", Some(gpt2), &[], &["no *.safetensors"]),
        (
            "mamba",
            Some(r#"{"model_type": "mamba"}"#),
            &[("x", &[1])],
            &["model_type `mamba`", "supported: llama, gpt2, bert"],
        ),
        ("missing", Some(gpt2), &[("wte.weight", &[8, 4])], &["no tensor `wpe.weight`", "embed.positions"]),
    ];
    for (name, config, tensors, want) in cases {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        if let Some(c) = config {
            write(&dir, "config.json", c);
        }
        if !tensors.is_empty() {
            safetensors(&dir.join("model.safetensors"), tensors);
        }
        let r = tfbench(&["run", "--no-probe", "--model", dir.to_str().unwrap(), "-o", out]);
        let mut needles = vec!["--model"];
        needles.extend_from_slice(want);
        assert_usage_error(&r, &needles);
        assert!(!Path::new(out).exists(), "{name}: nothing is written");
    }
}

/// The data folder's small models (scripts/make_arch_models.py), or `None`.
fn arch_data() -> Option<PathBuf> {
    let data = std::env::var_os("TFBENCH_DATA_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".data"), PathBuf::from);
    let arch = data.join("arch");
    if arch.join("gpt2-tiny-hf/model.safetensors").is_file() {
        Some(arch)
    } else {
        eprintln!("SKIPPED: {} is absent; run `bash scripts/fetch-test-data.sh`", arch.display());
        None
    }
}

/// Runs `load`, `pp16` and `tg8` on one model through `--model`, as JSON.
fn run_model(path: &Path) -> serde_json::Value {
    let dir = scratch("model-arch");
    let cfg =
        write(&dir, "g.toml", "[suites.inference.benchmarks.gguf]\ntest = [\"load\", \"pp16\", \"tg8\"]\n");
    let p = path.to_str().unwrap();
    let r = tfbench(&[
        "run",
        "--suite",
        "inference",
        "--model",
        p,
        "--config",
        &cfg,
        "--quick",
        "--no-probe",
        "--sample-size",
        "3",
        "--threads",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{p}: {}", r.stderr);
    json(&r)
}

#[test]
fn gpt2_bert_and_hugging_face_models_run_verified_through_model() {
    let Some(arch) = arch_data() else { return };
    let models = [
        ("gpt2-tiny.q4_1.gguf", false, "gpt2-tiny-Q4_1--tfbench-test-file-.q4_1"),
        ("gpt2-tiny-hf", false, "gpt2-tiny-hf.f32"),
        ("minilm-l6.q8_0.gguf", true, "MiniLM-L6-Q8_0--tfbench-test-file-.q8_0"),
    ];
    for (rel, encoder, name) in models {
        let v = run_model(&arch.join(rel));
        let cases = v["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 3, "{rel}");
        for c in cases {
            let (id, test) = (c["id"].as_str().unwrap(), c["params"]["test"].as_str().unwrap());
            // The id names the model and its type, so two files' baselines never mix.
            assert!(id.contains(&format!(",model={name},")), "{id}");
            if encoder && test == "tg8" {
                assert_eq!(c["status"]["state"], "skipped", "{id}");
                assert!(c["status"]["reason"].as_str().unwrap().contains("is an encoder"), "{id}");
                continue;
            }
            assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
            let reference = c["verification"]["reference"].as_str().unwrap();
            assert!(reference.contains("f64"), "{id}: {reference}");
            assert!(metric(c, "params").unwrap() > 0.0, "{id}");
        }
    }
}

/// A case whose id names another model than its file now holds fails
/// loudly (a baseline never gets another model's figures).
#[test]
fn a_file_that_no_longer_holds_the_ids_model_fails_its_case() {
    let Some(arch) = arch_data() else { return };
    let dir = scratch("model-stale");
    let file = arch.join("gpt2-tiny.q8_0.gguf");
    let text = format!(
        "[suites.inference.benchmarks.gguf]\nfile = [{:?}]\nmodel = [\"gpt2-tiny.q4_1\"]\ntest = [\"load\"]\n",
        file.to_str().unwrap()
    );
    let cfg = write(&dir, "g.toml", &text);
    let r = tfbench(&[
        "run",
        "--suite",
        "inference",
        "--config",
        &cfg,
        "--quick",
        "--no-probe",
        "--format",
        "json",
        "gguf/",
    ]);
    assert_eq!(r.code, 3, "case failures exit 3: {}", r.stderr);
    let v = json(&r);
    let c = &v["cases"][0];
    assert_eq!(c["status"]["state"], "failed", "{c}");
    assert!(c["status"]["reason"].as_str().unwrap().contains("now holds model `gpt2-tiny-Q8_0"), "{c}");
}
