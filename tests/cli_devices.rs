//! The device seam through the binary: `--device` choices, errors naming
//! them, and CPU case ids unchanged.

mod common;
use common::*;

#[test]
fn unknown_devices_are_refused_with_the_choices() {
    for cmd in
        [&["list", "--device", "tpu"][..], &["run", "--device", "tpu", "--suite", "tensor", "--quick"][..]]
    {
        let r = tfbench(cmd);
        assert_eq!(r.code, 2, "{cmd:?}: {}", r.stderr);
        assert!(r.stderr.contains("unknown device `tpu`") && r.stderr.contains("cuda:N"), "{}", r.stderr);
    }
}

#[test]
fn cpu_ids_are_unchanged_and_a_device_without_benchmarks_says_so() {
    let (r, v) = run_json(&["list", "--suite", "tensor", "--quick", "--format", "json", "--device", "cpu"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plain = json(&tfbench(&["list", "--suite", "tensor", "--quick", "--format", "json"]));
    assert_eq!(v["cases"], plain["cases"], "--device cpu is the default plan");
    // quant has no GPU benchmark (the tensor suite's are in tests/cli_cuda.rs).
    let r = tfbench(&["run", "--suite", "quant", "--quick", "--no-probe", "--device", "cuda:0"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--device cuda:0") && r.stderr.contains("runs there yet"), "{}", r.stderr);
}
