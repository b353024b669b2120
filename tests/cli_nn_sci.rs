//! The nn and sci suites through the real binary: `list` shows their
//! benchmarks with the FLOP conventions, a quick filtered run of each
//! verifies and times its cases (attention's peak memory from the
//! allocation pass: quadratic materialised, flat flash), and impossible
//! shapes in a config are refused before anything runs.

mod common;
use common::*;

#[test]
fn list_shows_the_benchmarks_and_how_fft_flops_are_counted() {
    let r = tfbench(&["list", "--suite", "nn"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for b in ["conv", "pool", "adaptive_pool", "norm", "rnn", "attention"] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing: {}", r.stdout);
    }
    assert!(
        r.stdout.contains("nn/conv/algo=im2col,layer=rn50_l3_3x3_b32,layout=nhwc,threads=all"),
        "{}",
        r.stdout
    );
    let r = tfbench(&["list", "--suite", "sci"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for b in ["fft", "fft_plan", "sparse_convert", "spmv", "spmm"] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing");
    }
    // Descriptions wrap to the terminal: compare with whitespace collapsed.
    let flat = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("5 N log2 N complex, 2.5 N log2 N real"), "{}", r.stdout);
}

#[test]
fn quick_runs_of_both_suites_verify_and_attention_peaks_differ() {
    // --max-time leaves room for the allocation pass on a loaded machine.
    let filter = "conv/algo=.*,layer=opbench_short,|attention/.*mask=causal,seq=512,";
    let (r, v) = suite_json("nn", "3", &["--max-time", "5", filter]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    // opbench_short by im2col and direct in both layouts, winograd in both.
    assert_eq!(cases.len(), 8, "{:?}", cases.iter().map(|c| &c["id"]).collect::<Vec<_>>());
    for c in cases {
        assert_eq!(c["status"]["state"], "ok", "{}", c["id"]);
        assert_eq!(c["verification"]["passed"], true, "{}", c["id"]);
    }
    let peak = |algo: &str| {
        let c = cases.iter().find(|c| c["id"].as_str().unwrap().contains(&format!("algo={algo}"))).unwrap();
        c["alloc"]["peak_bytes"].as_f64().unwrap_or_else(|| panic!("{algo}: no peak in {}", c["alloc"]))
    };
    // 8 heads x 512^2 scores = 8 MiB materialised; flash holds tiles only.
    assert!(peak("materialised") >= 8.0 * 1024.0 * 1024.0, "{}", peak("materialised"));
    assert!(peak("flash") * 8.0 < peak("materialised"), "{} vs {}", peak("flash"), peak("materialised"));

    let (r, v) = suite_json(
        "sci",
        "3",
        &["fft/kind=r2c,shape=1009,|spmv/density=0.01,impl=.*,n=5000,pattern=powerlaw"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3, "{:?}", cases.iter().map(|c| &c["id"]).collect::<Vec<_>>());
    for c in cases {
        assert_eq!(c["status"]["state"], "ok", "{}", c["id"]);
        assert_eq!(c["verification"]["passed"], true, "{}", c["id"]);
    }
}

#[test]
fn impossible_shapes_and_densities_are_refused_when_the_plan_is_built() {
    let dir = scratch("nn-sci-bad-config");
    let cfg = write(&dir, "conv.toml", "[suites.nn.benchmarks.conv]\nlayer = [\"1x6x8x8-k4x3x3-g4\"]\n");
    let r = tfbench(&["run", "--suite", "nn", "--quick", "--no-probe", "--config", &cfg, "conv"]);
    assert_usage_error(&r, &["conv.toml:2:", "layer", "groups 4 must divide"]);
    let cfg = write(&dir, "kernel.toml", "[suites.nn.benchmarks.conv]\nlayer = [\"1x3x4x4-k8x7x7\"]\n");
    let r = tfbench(&["run", "--suite", "nn", "--quick", "--no-probe", "--config", &cfg, "conv"]);
    assert_usage_error(&r, &["kernel.toml:2:", "larger than the padded input"]);
    // An algorithm that cannot compute a layer, both set by the config: the
    // value is refused with the rule. Setting only the layers leaves the
    // suite file's winograd cases to the layers they apply to.
    let cfg = write(
        &dir,
        "winograd.toml",
        "[suites.nn.benchmarks.conv]\nlayer = [\"rn50_l3_1x1_b1\"]\nalgo = [\"im2col\", \"winograd\"]\n",
    );
    let r = tfbench(&["run", "--suite", "nn", "--quick", "--no-probe", "--config", &cfg, "conv"]);
    assert_usage_error(&r, &["winograd.toml:3:", "algo", "layer rn50_l3_1x1_b1", "3x3 kernel, stride 1"]);
    let cfg = write(
        &dir,
        "layers.toml",
        "[suites.nn.benchmarks.conv]\nlayer = [\"rn50_l3_1x1_b1\", \"opbench_short\"]\n",
    );
    let r = tfbench(&["list", "--suite", "nn", "--config", &cfg, "conv/algo=winograd"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("algo=winograd,layer=opbench_short,layout=nhwc"), "{}", r.stdout);
    assert!(!r.stdout.contains("algo=winograd,layer=rn50_l3_1x1_b1"), "{}", r.stdout);
    let cfg = write(&dir, "density.toml", "[suites.sci.benchmarks.spmv]\ndensity = [1.5]\n");
    let r = tfbench(&["run", "--suite", "sci", "--quick", "--no-probe", "--config", &cfg, "spmv"]);
    assert_usage_error(&r, &["density.toml:2:", "density", "(0, 1]"]);
}
