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
    let cfg = write(
        &dir,
        "g.toml",
        "[suites.inference.benchmarks.gguf]\ntest = [\"load\", \"pp16\", \"tg8\", \"tokenize\"]\n",
    );
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
        assert_eq!(cases.len(), 4, "{rel}");
        for c in cases {
            let (id, test) = (c["id"].as_str().unwrap(), c["params"]["test"].as_str().unwrap());
            // The id names the model and its type, so two files' baselines never mix.
            assert!(id.contains(&format!(",model={name},")), "{id}");
            if encoder && test == "tg8" {
                assert_eq!(c["status"]["state"], "skipped", "{id}");
                assert!(c["status"]["reason"].as_str().unwrap().contains("is an encoder"), "{id}");
                continue;
            }
            // gpt2-tiny's file carries no tokenizer: nothing to tokenize,
            // said so. The directory's tokenizer.json is timed (when the
            // data folder's make_arch_models.py wrote one).
            if test == "tokenize" && !encoder {
                if arch.join(rel).join("tokenizer.json").is_file() {
                    assert_tokenizer_json_case(c);
                    continue;
                }
                assert_eq!(c["status"]["state"], "skipped", "{id}");
                let why = c["status"]["reason"].as_str().unwrap();
                assert!(
                    why.contains("tokenizer.ggml.model is `none`") || why.contains("has no tokenizer.json"),
                    "{why}"
                );
                continue;
            }
            assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
            if test == "tokenize" {
                continue; // MiniLM's WordPiece, checked against llama.cpp's ids in model_file_tokenize's tests
            }
            let reference = c["verification"]["reference"].as_str().unwrap();
            assert!(reference.contains("f64"), "{id}: {reference}");
            assert!(metric(c, "params").unwrap() > 0.0, "{id}");
        }
    }
}

/// A `tokenize` case of a directory's tokenizer.json: timed, its ids of the
/// check text equal to the Python tokenizers library's.
fn assert_tokenizer_json_case(c: &serde_json::Value) {
    let id = c["id"].as_str().unwrap();
    assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
    let v = c["verification"].to_string();
    assert!(v.contains("tokenizer.json") && v.contains("equal the tokenizers library's"), "{id}: {v}");
    assert!(metric(c, "tokens").unwrap() > 0.0, "{id}");
}

/// llama-bench's flags choose the model's tests, depths and repetitions on
/// the command line: `--tests`, `-p`, `-n`, `--pg`, `-d`, `-r` give exactly
/// their cases (the depths apply to every test), over a config's tests.
#[test]
fn llama_bench_flags_choose_the_models_cases() {
    let Some(arch) = arch_data() else { return };
    let dir = arch.join("gpt2-tiny-hf");
    // A config's test list is replaced by the flags.
    let cfg =
        write(&scratch("model-flags"), "g.toml", "[suites.inference.benchmarks.gguf]\ntest = [\"tg64\"]\n");
    let r = tfbench(&[
        "run",
        "--model",
        dir.to_str().unwrap(),
        "--config",
        &cfg,
        "--tests",
        "load,tokenize",
        "-p",
        "8,16",
        "-n",
        "4",
        "--pg",
        "8,4",
        "-d",
        "0,8",
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
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let cases = v["cases"].as_array().unwrap();
    let mut got: Vec<String> = cases
        .iter()
        .map(|c| format!("{}@{}", c["params"]["test"].as_str().unwrap(), c["params"]["depth"]))
        .collect();
    got.sort();
    let mut want: Vec<String> = ["load", "tokenize", "pp8", "pp16", "tg4", "pg8,4"]
        .iter()
        .flat_map(|t| [format!("{t}@0"), format!("{t}@8")])
        .collect();
    want.sort();
    assert_eq!(got, want);
    for c in cases {
        let id = c["id"].as_str().unwrap();
        assert!(id.starts_with("inference/gguf/") && id.contains(",model=gpt2-tiny-hf.f32,"), "{id}");
        if c["params"]["test"] == "tokenize" && !dir.join("tokenizer.json").is_file() {
            assert!(c["status"]["reason"].as_str().unwrap().contains("has no tokenizer.json"), "{id}");
            eprintln!(
                "SKIPPED part: {} has no tokenizer.json (bash scripts/fetch-test-data.sh)",
                dir.display()
            );
            continue;
        }
        if c["params"]["test"] == "tokenize" {
            assert_tokenizer_json_case(c);
        } else {
            assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        }
        // -r 2: two timed samples per case, as llama-bench's repetitions.
        assert_eq!(c["samples"].as_array().map(Vec::len), Some(2), "{id}");
    }
}

/// A bad test, count or depth, or the flags with no model to apply to:
/// exit 2 naming the flag and the valid forms, nothing written.
#[test]
fn bad_llama_bench_flags_are_refused_naming_the_flag() {
    let dir = scratch("model-flags-bad");
    let out = dir.join("out.json");
    let o = out.to_str().unwrap();
    let model = dir.join("m.gguf");
    std::fs::write(&model, b"not read: the flags are refused first").unwrap();
    let m = model.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 8] = [
        (&["--model", m, "--tests", "load,xx5"], &["--tests", "`xx5` is not a test", "ppN, tgN or pgN,M"]),
        (&["--model", m, "--tests", "pp0"], &["--tests", "`pp0` is not a test", "at least 1"]),
        (&["--model", m, "-p", "0"], &["--n-prompt", "`0` is not a token count", "at least 1"]),
        (&["--model", m, "-n", "x"], &["--n-gen", "`x` is not a token count"]),
        (&["--model", m, "--pg", "512"], &["--pg", "N,M"]),
        (&["--model", m, "-d", "deep"], &["--n-depth", "`deep` is not a depth", "0 or more"]),
        (&["--model", m, "-r", "0"], &["--repetitions"]),
        (&["--suite", "inference", "-p", "64"], &["--n-prompt chooses the tests of a model", "--model PATH"]),
    ];
    for (args, needles) in cases {
        let mut a = vec!["run", "--no-probe", "--quick", "-o", o];
        a.extend_from_slice(args);
        let r = tfbench(&a);
        assert_usage_error(&r, needles);
        assert!(!out.exists(), "{args:?}: nothing is written");
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

/// A GGUF v3 file of `arch`: u32 metadata under `{arch}.`, a LayerNorm
/// epsilon, and zero-filled F32 tensors (ggml dims).
fn gguf(path: &Path, arch: &str, meta: &[(&str, u32)], tensors: &[(&str, &[u64])]) {
    let s = |out: &mut Vec<u8>, x: &str| {
        out.extend((x.len() as u64).to_le_bytes());
        out.extend(x.as_bytes());
    };
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((meta.len() as u64 + 2).to_le_bytes());
    s(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes());
    s(&mut b, arch);
    s(&mut b, &format!("{arch}.attention.layer_norm_epsilon"));
    b.extend(6u32.to_le_bytes());
    b.extend(1e-5f32.to_le_bytes());
    for (k, v) in meta {
        s(&mut b, &format!("{arch}.{k}"));
        b.extend(4u32.to_le_bytes());
        b.extend(v.to_le_bytes());
    }
    let mut off = 0u64;
    for (name, dims) in tensors {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(0u32.to_le_bytes());
        b.extend(off.to_le_bytes());
        off += (dims.iter().product::<u64>() * 4).next_multiple_of(32);
    }
    b.resize(b.len().next_multiple_of(32) + off as usize, 0);
    std::fs::write(path, b).expect("write gguf");
}

/// A `gpt2` GGUF file without its blocks' tensors: exit 2 naming the first
/// one missing, nothing written.
#[test]
fn a_gguf_file_missing_a_tensor_is_refused_naming_it() {
    let dir = scratch("model-gguf-missing");
    let (file, out) = (dir.join("gpt2.gguf"), dir.join("out.json"));
    let meta = [
        ("embedding_length", 4),
        ("attention.head_count", 1),
        ("feed_forward_length", 8),
        ("block_count", 1),
        ("context_length", 4),
    ];
    gguf(&file, "gpt2", &meta, &[("token_embd.weight", &[4, 8]), ("position_embd.weight", &[4, 4])]);
    let r = tfbench(&["run", "--no-probe", "--model", file.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_usage_error(
        &r,
        &["--model", "no tensor `output_norm.weight`, which the `gpt2` architecture needs"],
    );
    assert!(!out.exists(), "nothing is written");
}

/// Whether this CPU decodes through tfbench's one-token layout (and so makes
/// a decode copy of Q8_0/Q4_0/Q4_1 matrices): AVX-512 VNNI with BW and VL,
/// and F16C and FMA (the kernel's whole feature list), unless
/// `TFBENCH_MAX_ISA` caps dispatch below VNNI.
fn cpu_makes_decode_copies() -> bool {
    // VNNI sits above every level TFBENCH_MAX_ISA can name but `native`, so
    // any other cap (inherited by the binary) rules the copies out.
    let capped = std::env::var("TFBENCH_MAX_ISA")
        .is_ok_and(|v| !v.trim().is_empty() && !v.trim().eq_ignore_ascii_case("native"));
    if capped {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("f16c")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A model over the memory budget is refused before a tensor page is read,
/// with the figures; on a CPU that makes a decode copy of the Q8_0 matrices
/// when generating, the budget counts that copy too.
#[test]
fn a_model_over_the_memory_budget_is_refused_with_the_figures() {
    let Some(arch) = arch_data() else { return };
    let file = arch.join("gpt2-tiny.q8_0.gguf");
    let size = std::fs::metadata(&file).unwrap().len() as f64;
    let run = |gib: f64| {
        tfbench_env(
            &[("TFBENCH_MEM_AVAILABLE_GIB", &format!("{gib:e}"))],
            &[
                "run",
                "--suite",
                "inference",
                "--model",
                file.to_str().unwrap(),
                "--tests",
                "tg4",
                "--quick",
                "--no-probe",
                "--sample-size",
                "3",
                "--format",
                "json",
            ],
        )
    };
    // Refused when the model is resolved, before any case runs: exit 2
    // with the figures, nothing written.
    let refused = |r: &Run, needles: &[&str]| {
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stdout.trim().is_empty(), "{}", r.stdout);
        for n in needles {
            assert!(r.stderr.contains(n), "{n}: {}", r.stderr);
        }
    };
    // Half the file's size: refused whatever the CPU.
    let r = run(0.5 * size / 0.9 / f64::from(1u32 << 30));
    refused(&r, &["--model", "memory budget", "nothing was loaded"]);
    // Room for the file and 2% more: enough without a decode copy, not with
    // one (the copy is about 94% of the Q8_0 matrices' bytes).
    let r = run(1.02 * size / 0.9 / f64::from(1u32 << 30));
    if cpu_makes_decode_copies() {
        refused(&r, &["decode copy", "AVX-512 VNNI", "memory budget", "nothing was loaded"]);
    } else {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(json(&r)["cases"][0]["status"]["state"], "ok", "{}", r.stdout);
    }
}
