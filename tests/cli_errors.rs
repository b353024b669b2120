//! Every user error: a clear message naming what is wrong, and exit code 2.

mod common;
use common::*;

#[test]
fn unknown_suite_lists_the_known_ones() {
    assert_usage_error(
        &tfbench(&["run", "--suite", "tensr", "--no-probe"]),
        &["unknown suite `tensr`", "known suites: tensor"],
    );
    assert_usage_error(&tfbench(&["list", "--suite", "nope"]), &["unknown suite `nope`", "tensor"]);
}

#[test]
fn bad_regex_shows_the_regex_error() {
    assert_usage_error(&tfbench(&["list", "matmul(["]), &["invalid filter regex `matmul([`", "unclosed"]);
    assert_usage_error(&tfbench(&["run", "--no-probe", "--skip", "*x"]), &["invalid --skip regex"]);
}

#[test]
fn a_filter_matching_nothing_is_an_error() {
    assert_usage_error(&tfbench(&["run", "--no-probe", "no-such-case"]), &["no case matches"]);
}

#[test]
fn malformed_config_names_file_line_and_column() {
    let dir = scratch("config-errors");
    let p = write(&dir, "broken.toml", "[harness]\nsample_size = 10\nwarm_up_time = = 1\n");
    assert_usage_error(&tfbench(&["run", "--no-probe", "--config", &p]), &["broken.toml:3:"]);
    let y = write(&dir, "broken.yaml", "harness:\n  sample_size: [1,\n");
    assert_usage_error(&tfbench(&["list", "--config", &y]), &["broken.yaml:"]);
}

#[test]
fn unknown_config_keys_list_the_valid_choices() {
    let dir = scratch("config-unknown");
    let p = write(&dir, "typo.toml", "[harness]\nsample_size = 10\nwarmup_time = 1\n");
    assert_usage_error(
        &tfbench(&["run", "--no-probe", "--config", &p]),
        &["typo.toml:3:1", "warmup_time", "warm_up_time"],
    );
    let y = write(&dir, "typo.yaml", "harness:\n  samples: 3\n");
    assert_usage_error(&tfbench(&["list", "--config", &y]), &["typo.yaml:2:", "samples", "sample_size"]);
    let s = write(&dir, "suite.toml", "[suites.tensr.harness]\nsample_size = 3\n");
    assert_usage_error(
        &tfbench(&["list", "--config", &s]),
        &["suite.toml:1:9", "tensr", "known suites: tensor"],
    );
    let b = write(&dir, "bench.toml", "[suites.tensor.benchmarks.matmull]\nshape = \"8x8x8\"\n");
    assert_usage_error(
        &tfbench(&["list", "--config", &b]),
        &["bench.toml:1:", "matmull", "valid:", "matmul"],
    );
    let k = write(&dir, "param.toml", "[suites.tensor.benchmarks.matmul]\nsize = \"8x8x8\"\n");
    assert_usage_error(&tfbench(&["list", "--config", &k]), &["param.toml:2:1", "`size`", "valid:", "shape"]);
    let v = write(&dir, "value.toml", "[harness]\nconfidence_level = 95\n");
    assert_usage_error(
        &tfbench(&["list", "--config", &v]),
        &["value.toml:2:1", "confidence_level", "(0, 1)"],
    );
    let e = write(&dir, "conf.ini", "x=1\n");
    assert_usage_error(&tfbench(&["list", "--config", &e]), &["unknown extension", ".toml, .yaml"]);
}

#[test]
fn missing_config_file_is_named() {
    assert_usage_error(
        &tfbench(&["list", "--config", "/nonexistent/tfbench.toml"]),
        &["/nonexistent/tfbench.toml"],
    );
}

#[test]
fn bad_flag_values_are_usage_errors() {
    let r = tfbench(&["run", "--no-probe", "--confidence-level", "2"]);
    assert_usage_error(&r, &["--confidence-level", "(0, 1)"]);
    let r = tfbench(&["run", "--format", "xml"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("xml") && r.stderr.contains("bencher"), "{}", r.stderr);
    let r = tfbench(&["run", "--no-probe", "--sample-size", "1"]);
    assert_usage_error(&r, &["--sample-size", "at least 2"]);
}

#[test]
fn unwritable_output_fails_before_running() {
    let r = tfbench(&[
        "run",
        "--no-probe",
        "--output",
        "/nonexistent-dir/r.json",
        "tensor/binary/op=add,shape=100x100$",
    ]);
    assert_usage_error(&r, &["/nonexistent-dir", "does not exist"]);
    assert!(!r.stderr.contains("[1/"), "nothing ran: {}", r.stderr);
}

#[test]
fn bad_parameter_values_are_refused_before_anything_runs() {
    let dir = scratch("config-values");
    let t = write(
        &dir,
        "bad.toml",
        "[run]\nthreads = 1\n\n[suites.inference.benchmarks.decode]\nmodel = [\"gpt2-tiny\"]\ndtype = [\n  \"f32\",\n  \"f33\",\n]\n",
    );
    let r = tfbench(&["run", "--no-probe", "--config", &t]);
    assert_usage_error(
        &r,
        &["bad.toml:8:4:", "inference/decode", "`dtype`", "\"f33\"", "valid: f32, f16, bf16"],
    );
    assert!(!r.stderr.contains("running"), "nothing ran: {}", r.stderr);
    let y = write(
        &dir,
        "bad.yaml",
        "run:\n  suites: [quant]\nsuites:\n  quant:\n    benchmarks:\n      linear:\n        format:\n          - int8\n          - int3\n",
    );
    let r = tfbench(&["run", "--no-probe", "--config", &y]);
    assert_usage_error(&r, &["bad.yaml:9:13:", "quant/linear", "`format`", "\"int3\"", "q4_0"]);
    assert!(!r.stderr.contains("running"), "nothing ran: {}", r.stderr);
}

#[test]
fn every_suite_refuses_a_bad_value_with_its_choices() {
    let dir = scratch("config-values-suites");
    for (suite, bench, line, needles) in [
        ("tensor", "matmul", "impl = \"blas\"", &["`impl` = \"blas\"", "matrixmultiply"][..]),
        ("inference", "encoder", "model = [\"bert-base\", \"gpt5\"]", &["\"gpt5\"", "bert-tiny"]),
        ("tokenizer", "normalize", "form = \"nfd\"", &["\"nfd\"", "nfkc"]),
        ("quant", "quantize", "dist = \"cauchy\"", &["\"cauchy\"", "heavy"]),
        ("optim", "zero", "ranks = [0]", &["`ranks` = 0", "positive integer"]),
        ("memory", "bandwidth", "threads = [\"many\"]", &["\"many\"", "\"all\""]),
    ] {
        let name = format!("{suite}.toml");
        let p = write(&dir, &name, &format!("[suites.{suite}.benchmarks.{bench}]\n{line}\n"));
        let at = format!("{name}:2:");
        let mut all = vec![at.as_str()];
        all.extend_from_slice(needles);
        assert_usage_error(&tfbench(&["list", "--config", &p]), &all);
    }
}

/// `--model` with a file that is not a usable GGUF model: exit 2 naming the
/// cause, and no results file written.
#[test]
fn a_bad_model_file_is_refused_before_anything_runs() {
    let dir = scratch("model-errors");
    let out = dir.join("out.json");
    let out = out.to_str().expect("utf-8 path");
    let bad = write(&dir, "bad.gguf", "hello, not a model");
    let mut trunc = b"GGUF".to_vec();
    trunc.extend_from_slice(&3u32.to_le_bytes());
    trunc.extend_from_slice(&1000u64.to_le_bytes());
    let t = dir.join("trunc.gguf");
    std::fs::write(&t, trunc).expect("write");
    let t = t.to_str().expect("utf-8 path");
    for (file, want) in [
        (bad.as_str(), "not a GGUF file"),
        (t, "tensor count at byte 8 is 1000"),
        ("/nonexistent/m.gguf", "/nonexistent/m.gguf"),
    ] {
        let r = tfbench(&["run", "--no-probe", "--model", file, "-o", out]);
        assert_usage_error(&r, &["--model", want]);
        assert!(!std::path::Path::new(out).exists(), "{file}: nothing is written");
    }
}
