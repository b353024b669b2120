//! The optim suite through the real binary: list, a quick filtered run with
//! JSON parsed back (verification, metrics from the allocator), and errors.

mod common;
use common::*;
use serde_json::Value;

#[test]
fn list_shows_the_optim_benchmarks_and_target_case() {
    let r = tfbench(&["list", "--suite", "optim"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for b in [
        "optimizer_step",
        "state_memory",
        "mixed_precision",
        "scheduler",
        "zero",
        "train_step",
        "grad_accum",
        "checkpointing",
    ] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing");
    }
    assert!(
        r.stdout.contains("optim/optimizer_step/form=fused,optimizer=adamw,params=100000000,threads=all")
    );
}

#[test]
fn quick_run_verifies_and_reports_measured_memory() {
    let (r, v) = suite_json(
        "optim",
        "3",
        &[
            "state_memory/optimizer=(adamw|sgd),|zero/params=2097152,ranks=4,stage=(0|3)|scheduler/kind=cosine",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    for c in cases {
        assert_eq!(c["status"]["state"], "ok", "{}", c["id"]);
        assert_eq!(c["verification"]["passed"], true);
    }
    let by = |id: &str| cases.iter().find(|c| c["id"].as_str().unwrap().contains(id)).unwrap();
    // Measured by the allocator: other threads may add a few KiB.
    let near = |case: &Value, name: &str, want: f64| {
        let got = metric(case, name).unwrap_or_else(|| panic!("{name}"));
        assert!((got - want).abs() < 0.01 * want.max(1.0), "{got} vs {want}");
    };
    near(by("optimizer=adamw"), "state_bytes_per_param", 8.0);
    near(by("optimizer=sgd,"), "state_bytes_per_param", 0.0);
    near(by("stage=0"), "per_rank_vs_unsharded", 1.0);
    near(by("stage=3"), "per_rank_vs_unsharded", 0.25);
    assert!(by("stage=3")["verification"]["detail"].as_str().unwrap().contains("simulated in-process"));
}

#[test]
fn unknown_parameter_values_name_the_valid_choices() {
    let dir = scratch("optim-bad-config");
    let cfg = write(&dir, "bad.toml", "[suites.optim.benchmarks.scheduler]\nkind = \"poly\"\n");
    let r = tfbench(&["run", "--suite", "optim", "--quick", "--no-probe", "--config", &cfg, "scheduler"]);
    // Refused while the plan is built, before anything runs.
    assert_usage_error(&r, &["bad.toml:2:", "valid: step, exponential"]);
}
