//! The inference suite through the real binary: list, a quick run on the
//! tiny models with JSON parsed back, the memory refusal, reduced layers,
//! bad parameter values and the real-weights (MiniLM) path.

mod common;
use common::*;
use std::path::Path;

#[test]
fn list_shows_the_benchmarks_and_the_published_shapes() {
    let r = tfbench(&["list", "--suite", "inference"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for b in ["encoder", "embed", "prefill", "decode"] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing");
    }
    for id in [
        "inference/encoder/batch=32,dtype=f32,layers=full,model=bert-base,seq=512,shape=preset",
        "inference/decode/batch=1,depth=32,dtype=f32,gen=8,layers=full,model=llama-13b,shape=preset",
        "inference/decode/batch=1,depth=32,dtype=bf16,gen=8,layers=2,model=llama-7b,shape=preset",
    ] {
        assert!(r.stdout.contains(id), "{id} missing");
    }
}

#[test]
fn quick_run_on_tiny_models_verifies_and_reports_latency_and_memory() {
    let (r, v) = suite_json(
        "inference",
        "3",
        &[
            "(encoder|prefill|decode)/batch=1,.*dtype=(f32|bf16),.*model=(bert|gpt2|llama)-tiny,(prompt=32|seq=128|shape)",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 8, "{}", cases.len());
    let mut decodes = 0;
    for c in cases {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert_eq!(c["verification"]["passed"], true, "{id}");
        assert!(c["verification"]["reference"].as_str().unwrap().contains("f64"), "{id}");
        assert!(c["throughput"].as_array().unwrap().iter().any(|t| t["kind"] == "tokens"), "{id}");
        let (planned, peak) = (metric(c, "planned_bytes").unwrap(), metric(c, "alloc_peak_bytes").unwrap());
        assert!(
            (peak - planned).abs() <= 0.05 * planned + 16.0 * 1048576.0,
            "{id}: plan {planned} vs peak {peak}"
        );
        if id.contains("/decode/") {
            decodes += 1;
            let (p50, p99) = (metric(c, "tpot_p50_ns").unwrap(), metric(c, "tpot_p99_ns").unwrap());
            assert!(p50 > 0.0 && p50 <= p99, "{id}");
            assert!(metric(c, "decode_vs_recompute_max_error").unwrap() < 1e-3, "{id}");
            assert!(c["throughput"].as_array().unwrap().iter().any(|t| t["kind"] == "bytes"), "{id}");
        }
        if id.contains("/prefill/") {
            assert!(metric(c, "ttft_p50_ns").unwrap() > 0.0, "{id}");
        }
    }
    assert!(decodes >= 4, "{decodes}");
}

#[test]
fn llama_13b_f32_is_refused_on_a_24_gib_machine_and_the_run_goes_on() {
    let dir = scratch("inference-refusal");
    let cfg = write(
        &dir,
        "big.toml",
        r#"
[suites.inference.benchmarks.decode]
model = ["llama-13b", "llama-tiny"]
dtype = ["f32"]
depth = [8]
gen = [2]
batch = [1]
layers = ["full"]
"#,
    );
    let r = tfbench_env(
        &[("TFBENCH_MEM_AVAILABLE_GIB", "24")],
        &[
            "run",
            "--suite",
            "inference",
            "--config",
            &cfg,
            "--quick",
            "--no-probe",
            "--format",
            "json",
            "decode",
        ],
    );
    assert_eq!(r.code, 0, "skips are not failures: {}", r.stderr);
    let v = json(&r);
    let cases = v["cases"].as_array().unwrap();
    let big = cases.iter().find(|c| c["id"].as_str().unwrap().contains("llama-13b")).expect("13b case");
    assert_eq!(big["status"]["state"], "skipped", "{}", big["status"]);
    let why = big["status"]["reason"].as_str().unwrap();
    assert!(why.contains("needs 48.") || why.contains("needs 49."), "{why}");
    assert!(why.contains("layers = ") && why.contains("bf16"), "{why}");
    let tiny = cases.iter().find(|c| c["id"].as_str().unwrap().contains("llama-tiny")).expect("tiny case");
    assert_eq!(tiny["status"]["state"], "ok", "the run goes on after a refusal");
}

#[test]
fn reduced_layers_show_in_the_id_and_the_metrics_and_bad_values_name_the_choices() {
    let dir = scratch("inference-layers");
    let cfg = write(
        &dir,
        "layers.toml",
        r#"
[suites.inference.benchmarks.prefill]
model = ["llama-tiny"]
layers = [1]
prompt = [8]
dtype = ["f32"]
shape = ["hidden:64+heads:4+kv_heads:2+ffn:160"]
"#,
    );
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
        "prefill",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let c = &v["cases"][0];
    assert!(c["id"].as_str().unwrap().contains("layers=1"), "{}", c["id"]);
    assert_eq!(metric(c, "layers"), Some(1.0));
    assert_eq!(metric(c, "layers_of_full_model"), Some(2.0));
    assert!(c["verification"]["detail"].as_str().unwrap().contains("layers reduced to 1 of 2"));

    let bad = write(
        &dir,
        "bad.toml",
        "[suites.inference.benchmarks.decode]\ndtype = [\"int3\"]\nmodel = [\"gpt2-tiny\"]\n",
    );
    let r = tfbench(&[
        "run",
        "--suite",
        "inference",
        "--config",
        &bad,
        "--quick",
        "--no-probe",
        "decode/batch=1,depth=128",
    ]);
    // Refused while the plan is built, before anything runs.
    assert_usage_error(&r, &["bad.toml:2:", "valid: f32, f16, bf16"]);
    let bad = write(&dir, "bad2.toml", "[suites.inference.benchmarks.decode]\nwidth = [3]\n");
    let r = tfbench(&["run", "--suite", "inference", "--config", &bad, "--quick", "--no-probe"]);
    assert_usage_error(&r, &["valid: batch, depth, dtype, gen, layers, model, shape"]);
}

#[test]
fn minilm_real_weights_match_the_numpy_fixture_or_skip_with_a_message() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join(".data");
    if !data.join("minilm/model.safetensors").is_file() {
        eprintln!("SKIPPED: .data/minilm is absent; run `bash scripts/fetch-test-data.sh` (CI does)");
    } else {
        let r = tfbench_env(
            &[("TFBENCH_DATA_DIR", data.to_str().unwrap())],
            &[
                "run",
                "--suite",
                "inference",
                "--quick",
                "--no-probe",
                "--sample-size",
                "3",
                "--format",
                "json",
                "embed",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let v = json(&r);
        let c = &v["cases"][0];
        assert_eq!(c["status"]["state"], "ok", "{}", c["status"]);
        assert!(c["verification"]["reference"].as_str().unwrap().contains("MiniLM"));
        assert!(metric(c, "fixture_max_abs_error").unwrap() < 1e-4);
        assert!(metric(c, "fixture_min_cosine").unwrap() > 0.9999);
        assert_eq!(metric(c, "params"), Some(22_713_216.0));
    }
    // Without the files the case is skipped with the fetch command, not failed.
    let empty = scratch("inference-no-data");
    let r = tfbench_env(
        &[("TFBENCH_DATA_DIR", empty.to_str().unwrap())],
        &["run", "--suite", "inference", "--quick", "--no-probe", "--format", "json", "embed"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["cases"][0]["status"]["state"], "skipped");
    assert!(v["cases"][0]["status"]["reason"].as_str().unwrap().contains("fetch-test-data.sh"));
}

/// A model file end to end: the data folder's SmolLM2 with its own
/// tokenizer (`tokenize`, verified against llama.cpp's ids) and a prompt of
/// real text, shown in llama-bench's layout, the results file beside it.
/// Skips (saying so) without the file.
#[test]
fn model_file_tokenizes_and_renders_in_llama_bench_layout() {
    let dir = scratch("model-llama-bench");
    let cfg = write(
        &dir,
        "g.toml",
        "[suites.inference.benchmarks.gguf]\nfile = [\"smollm2\"]\ntest = [\"tokenize\", \"pp16\"]\ndepth = [0]\n",
    );
    let run = |format: &str| {
        tfbench(&[
            "run",
            "--suite",
            "inference",
            "--config",
            &cfg,
            "--quick",
            "--no-probe",
            "--sample-size",
            "3",
            "--threads",
            "2",
            "--format",
            format,
            "gguf/",
        ])
    };
    let r = run("json");
    let v = json(&r);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "{}", r.stderr);
    if cases.iter().any(|c| c["status"]["state"] == "skipped") {
        eprintln!("skipped: SmolLM2 not in the data folder (bash scripts/fetch-test-data.sh)");
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    let tok = cases.iter().find(|c| c["params"]["test"] == "tokenize").unwrap();
    let detail = tok["verification"]["detail"].as_str().unwrap();
    assert!(detail.contains("equal llama.cpp's"), "{detail}");
    assert_eq!(metric(tok, "tokens"), Some(2841.0), "Genesis 1-3 through SmolLM2's tokenizer");
    let pp = cases.iter().find(|c| c["params"]["test"] == "pp16").unwrap();
    assert!(pp["verification"]["detail"].as_str().unwrap().contains("prompt: Genesis 1-3"));
    let r = run("llama-bench");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with("| model | size | params | backend | threads | test | t/s |"),
        "{}",
        r.stdout
    );
    for test in ["tokenize", "pp16"] {
        let row = format!("| smollm2 | 92.10 MiB | 134.52 M | CPU | 2 | {test} | ");
        assert!(r.stdout.contains(&row), "{row}\n{}", r.stdout);
    }
}

/// llama.cpp's vocabulary-only GGUF files (the data folder's llama-vocab/:
/// SentencePiece, WordPiece and byte-level BPE tokenizers, no weights; their
/// tokenizers are checked through the library in `gguf::tokenizer`) are
/// refused by `--model` before anything runs: exit 2 naming the file and the
/// missing tensor (or the architecture tfbench does not run), nothing written.
/// Skips, saying so, without the files.
#[test]
fn a_vocabulary_only_file_is_refused_naming_what_is_missing() {
    let data = std::env::var_os("TFBENCH_DATA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".data"));
    let dir = scratch("vocab-only");
    let out = dir.join("out.json");
    let out = out.to_str().expect("utf-8 path");
    for name in ["llama-spm", "bert-bge", "gpt-2"] {
        let f = data.join(format!("llama-vocab/ggml-vocab-{name}.gguf"));
        if !f.exists() {
            eprintln!("skipped: {} absent (bash scripts/fetch-test-data.sh)", f.display());
            continue;
        }
        let f = f.to_str().expect("utf-8 path");
        let r = tfbench(&["run", "--no-probe", "--model", f, "-o", out]);
        let what = if name == "llama-spm" { "no tensor `token_embd.weight`" } else { "`" };
        assert_usage_error(&r, &["--model", f, what]);
        assert!(
            r.stderr.contains("no tensor `") || r.stderr.contains("is not one tfbench runs"),
            "{name}: {}",
            r.stderr
        );
        assert!(!Path::new(out).exists(), "{name}: nothing is written");
    }
}
