//! The tokenizer suite through the real binary: `list`, quick runs parsed
//! back from JSON, config overrides, bad values and absent data.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// Whether the real files are there, found the way the binary finds them
/// (it inherits this process's environment and working folder); tests that
/// need them say so and return.
fn have_data() -> bool {
    let d = tfbench::data::lookup();
    let missing =
        ["gpt2/encoder.json", "gpt2/vocab.bpe", "minilm/tokenizer.json", "llama2/tokenizer.json", "kjv.txt"]
            .iter()
            .find_map(|f| d.find(f).err());
    if let Some(why) = &missing {
        eprintln!("SKIPPED: real tokenizer files absent: {why}");
    }
    missing.is_none()
}

/// A config that shrinks every benchmark's input so runs take a second.
const SMALL: &str = r#"
[suites.tokenizer.benchmarks.encode]
input_bytes = [8192]
[suites.tokenizer.benchmarks.encode_batch]
input_bytes = [8192]
[suites.tokenizer.benchmarks.decode]
input_bytes = [8192]
[suites.tokenizer.benchmarks.special_tokens]
input_bytes = [8192]
[suites.tokenizer.benchmarks.normalize]
input_bytes = [8192]
[suites.tokenizer.benchmarks.pretokenize]
input_bytes = [8192]
"#;

fn cases(v: &Value) -> Vec<Value> {
    v["cases"].as_array().cloned().unwrap_or_default()
}

#[test]
fn list_shows_every_benchmark_and_real_or_fallback_ids() {
    let r = tfbench(&["list", "--suite", "tokenizer", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let benches: Vec<&str> = v["suites"][0]["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        benches,
        [
            "encode",
            "encode_batch",
            "decode",
            "offsets",
            "special_tokens",
            "normalize",
            "pretokenize",
            "train"
        ]
    );
    let want = if have_data() { "vocab=gpt2" } else { "vocab=gpt2-trained" };
    assert!(r.stdout.contains(&format!(
        "tokenizer/encode_batch/corpus=kjv,input_bytes=65536,length=line,threads=1,{want}\""
    )));
}

#[test]
fn quick_run_verifies_and_reports_rates_and_metrics() {
    if !have_data() {
        return;
    }
    let dir = scratch("tok-quick");
    let cfg = write(&dir, "small.toml", SMALL);
    let filter = "tokenizer/(encode/.*length=line,vocab=(gpt2|bert)$|encode_batch/.*length=line,threads=all,vocab=gpt2|normalize/corpus=multilingual,form=bert|pretokenize/corpus=multilingual,.*bytelevel)";
    let (r, v) = run_json(&[
        "run",
        "--suite",
        "tokenizer",
        "--quick",
        "--no-probe",
        "--config",
        &cfg,
        filter,
        "-f",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = cases(&v);
    assert_eq!(cases.len(), 5, "{}", r.stderr);
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"]["state"], "ok", "{id}");
        assert_eq!(c["verification"]["passed"], true, "{id}");
        let kinds: Vec<&str> =
            c["throughput"].as_array().unwrap().iter().map(|t| t["kind"].as_str().unwrap()).collect();
        assert!(kinds.contains(&"bytes"), "{id}: {kinds:?}");
        if id.contains("/encode") {
            assert!(kinds.contains(&"tokens"), "{id}");
            let reference = c["verification"]["reference"].as_str().unwrap();
            assert!(reference.contains("known ids"), "{id}: {reference}");
        }
        if id.contains("/encode/") {
            let metrics = c["metrics"].as_array().expect("metrics");
            assert!(metrics.iter().any(|m| m["name"] == "latency_p99"), "{id}");
        }
    }
}

#[test]
fn config_paths_and_bad_values() {
    if !have_data() {
        return;
    }
    let bert = tfbench::data::find("minilm/tokenizer.json").expect("have_data checked it");
    let dir = scratch("tok-config");
    // A tokenizer.json given by path, on a text file given by path.
    let corpus = write(&dir, "text.txt", &"The quick brown fox jumps over the lazy dog.\n".repeat(50));
    let cfg = write(
        &dir,
        "paths.toml",
        &format!(
            "[suites.tokenizer.benchmarks.encode]\nvocab = [\"{}\"]\ncorpus = [\"{corpus}\"]\nlength = [\"line\"]\ninput_bytes = [0]\n",
            bert.display()
        ),
    );
    let (r, v) = run_json(&[
        "run",
        "--suite",
        "tokenizer",
        "--quick",
        "--no-probe",
        "--config",
        &cfg,
        "tokenizer/encode/",
        "-f",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(cases(&v).len(), 1);
    assert_eq!(cases(&v)[0]["status"]["state"], "ok");
    // An unknown vocabulary is refused before anything runs, with the valid choices named.
    let cfg = write(
        &dir,
        "bad.toml",
        "[suites.tokenizer.benchmarks.encode]\nvocab = [\"gpt5\"]\ninput_bytes = [1024]\nlength = [\"line\"]\n",
    );
    let r = tfbench(&[
        "run",
        "--suite",
        "tokenizer",
        "--quick",
        "--no-probe",
        "--config",
        &cfg,
        "tokenizer/encode/",
        "-f",
        "json",
    ]);
    assert_usage_error(&r, &["bad.toml:2:", "valid: gpt2, bert, llama2"]);
}

#[test]
fn absent_data_gives_trained_fallback_ids_and_skips_real_vocabularies() {
    let dir = scratch("tok-nodata");
    let empty = dir.join("empty-data");
    std::fs::create_dir_all(&empty).unwrap();
    let bin = env!("CARGO_BIN_EXE_tfbench");
    let list = Command::new(bin)
        .args(["list", "--suite", "tokenizer", "--format", "json"])
        .env("TFBENCH_DATA_DIR", &empty)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(out.contains("vocab=gpt2-trained") && out.contains("vocab=llama2-trained"), "{out}");
    assert!(!out.contains("vocab=gpt2\""), "a real vocabulary listed without its files");
    // Naming the real one in a config skips (not fails) with the reason.
    let cfg = write(
        &dir,
        "real.toml",
        "[suites.tokenizer.benchmarks.encode]\nvocab = [\"gpt2\"]\ncorpus = [\"multilingual\"]\nlength = [\"line\"]\n",
    );
    let run = Command::new(bin)
        .args([
            "run",
            "--suite",
            "tokenizer",
            "--quick",
            "--no-probe",
            "--config",
            &cfg,
            "tokenizer/encode/",
            "-f",
            "json",
        ])
        .env("TFBENCH_DATA_DIR", &empty)
        .env("TFBENCH_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let v: Value = serde_json::from_slice(&run.stdout).expect("json");
    let c = &cases(&v)[0];
    assert_eq!(c["status"]["state"], "skipped", "{c}");
    assert!(c["status"]["reason"].as_str().unwrap().contains("fetch-test-data.sh"), "{c}");
}

/// The whole default grid, smoke profile (slow: minutes on a busy 2-core machine).
#[test]
#[ignore]
fn whole_quick_suite_passes() {
    let (r, v) = run_json(&["run", "--suite", "tokenizer", "--quick", "--no-probe", "-f", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(cases(&v).iter().all(|c| c["status"]["state"] == "ok"), "{}", r.stderr);
}
