//! `TFBENCH_MAX_ISA` through the real binary: under `avx2` and `scalar`
//! every kernel's fallback runs verified on any machine (this one's AVX-512
//! included), the paths above the cap are skipped with the cap's reason,
//! the cap is recorded in the results and shown by `sysinfo`, and a bad
//! value is a usage error naming the variable and the choices.

mod common;
use common::*;
use serde_json::Value;

/// Small shapes of the benchmarks whose kernels dispatch on CPU features,
/// and a harness budget of a few milliseconds per case.
const SMALL: &str = r#"
[harness]
sample_size = 3
warm_up_time = 0.001
measurement_time = 0.005
max_time = 0.05
bootstrap_resamples = 200
[suites.quant.benchmarks.linear]
shape = ["1x256x128", "5x256x64"]
[suites.quant.benchmarks.dynamic]
shape = ["16x256x64"]
[suites.quant.benchmarks.int8_gemm]
shape = ["3x200x40"]
[suites.quant.benchmarks.quantize]
shape = "64x256"
[suites.tensor.benchmarks.matmul]
shape = ["7x13x5", "65x33x130"]
[suites.tensor.benchmarks.transpose]
shape = ["37x53", "300x513"]
[suites.optim.benchmarks.optimizer_step]
params = 100003
"#;

/// The selection: every quant int8/linear/dynamic case, quantize, the
/// tensor GEMMs (all implementations) and transpose, the fused optimizers
/// (`simd_dispatch!`) and the L1 STREAM kernels.
const FILTER: &str = "quant/(linear|dynamic|int8_gemm|quantize)/|tensor/(matmul|transpose)/|optim/optimizer_step/.*form=fused|memory/bandwidth/.*level=l1,threads=1";

fn run_capped(cap: &str) -> (Run, Value) {
    let dir = scratch(&format!("isa-{cap}"));
    let cfg = write(&dir, "small.toml", SMALL);
    let r = tfbench_env(
        &[("TFBENCH_MAX_ISA", cap), ("TFBENCH_OPENBLAS", "/nonexistent/libopenblas.so")],
        &[
            "run",
            "--suite",
            "quant",
            "--suite",
            "tensor",
            "--suite",
            "optim",
            "--suite",
            "memory",
            "--quick",
            "--no-probe",
            "--config",
            &cfg,
            "--format",
            "json",
            FILTER,
        ],
    );
    let v = json(&r);
    (r, v)
}

/// Every case ran verified, or was skipped because it needs what the cap
/// (or this CPU) excludes, with that reason; OpenBLAS is hidden so its
/// cases are the only other skips.
fn check(cap: &str) {
    let level = tfbench::isa::IsaLevel::parse(cap).unwrap();
    if tfbench::isa::cap() < level {
        // This test process is capped lower from outside, and an override
        // cannot raise it to derive what the binary does under `cap`.
        eprintln!("SKIPPED: TFBENCH_MAX_ISA={} is below {cap}", tfbench::isa::cap().name());
        return;
    }
    let (r, v) = run_capped(cap);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(v["environment"]["max_isa"], cap, "the cap is recorded with the results");
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 40, "{} cases", cases.len());
    let mut capped = 0;
    for c in cases {
        let id = c["id"].as_str().unwrap();
        if id.contains("impl=openblas") {
            assert_eq!(c["status"]["state"], "skipped", "{id}");
            continue;
        }
        // Derive what the binary must do under `cap` from the CPU and the
        // cap, in this process.
        let expected = tfbench::isa::with_cap(level, || expected_isa_skip(id));
        match expected {
            None => {
                assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
                assert_eq!(c["verification"]["passed"], true, "{id}");
            }
            Some(_) => {
                assert_eq!(c["status"]["state"], "skipped", "{id}: {}", c["status"]);
                let reason = c["status"]["reason"].as_str().unwrap();
                if reason.contains("is in force") {
                    // The binary names the environment variable, not the
                    // in-process override the test used to derive it.
                    assert!(reason.contains(&format!("TFBENCH_MAX_ISA={cap} is in force")), "{id}: {reason}");
                    capped += 1;
                } else {
                    assert!(reason.contains("this CPU has no"), "{id}: {reason}");
                }
            }
        }
    }
    // Each of these needs more than AVX2 on any CPU: skipped for the cap or
    // for the CPU, never run.
    for id in [
        "quant/int8_gemm/path=avx512_vnni,shape=3x200x40,threads=all",
        "tensor/matmul/impl=tfbench-packed,shape=7x13x5,threads=1",
    ] {
        let c = cases.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id} not run"));
        assert_eq!(c["status"]["state"], "skipped", "{id}");
    }
    if tfbench::isa::Feature::Avx512f.detected() {
        assert!(capped >= 2, "on an AVX-512 machine the cap itself skips cases ({capped})");
    }
    // tfbench's own GEMM has an AVX2 kernel: it runs under an AVX2 cap on
    // any CPU with AVX2 and FMA (issue 51), and is skipped only below.
    let own = cases
        .iter()
        .find(|c| c["id"] == "tensor/matmul/impl=tfbench,shape=65x33x130,threads=1")
        .expect("run");
    let avx2_cpu = tfbench::isa::Feature::Avx2.detected() && tfbench::isa::Feature::Fma.detected();
    let want = if cap == "scalar" || !avx2_cpu { "skipped" } else { "ok" };
    assert_eq!(own["status"]["state"], want, "{own}");
    // The 4-bit decode kernels report the AVX2 path under an avx2 cap (the
    // portable one under scalar, or on a CPU without AVX2, FMA and F16C).
    let q4 = cases
        .iter()
        .find(|c| c["id"] == "quant/linear/format=q4_0,shape=1x256x128,threads=all")
        .expect("q4_0 decode case");
    use tfbench::isa::Feature::{Avx2, F16c, Fma};
    let avx2 = level >= tfbench::isa::IsaLevel::Avx2 && [Avx2, Fma, F16c].iter().all(|f| f.detected());
    let path = if avx2 { "avx2" } else { "portable" };
    assert!(metric(q4, &format!("decode_path_{path}")).is_some(), "{q4}");
}

#[test]
fn capped_at_avx2_every_fallback_verifies_and_higher_paths_skip_with_the_cap() {
    check("avx2");
}

#[test]
fn capped_at_scalar_every_portable_kernel_verifies() {
    check("scalar");
    // Even the AVX2 int8 path is above a scalar cap.
    let (_, v) = run_capped("scalar");
    let avx2 = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "quant/int8_gemm/path=avx2,shape=3x200x40,threads=all")
        .expect("avx2 int8 case");
    assert_eq!(avx2["status"]["state"], "skipped");
}

#[test]
fn sysinfo_shows_the_cap_and_a_bad_value_names_the_choices() {
    let r = tfbench_env(&[("TFBENCH_MAX_ISA", "avx2")], &["sysinfo"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.lines().find(|l| l.contains("max isa")).expect("a max isa row");
    assert!(line.contains("avx2 (from TFBENCH_MAX_ISA)"), "{line}");
    assert!(!line.contains("avx512f"), "nothing above the cap is listed as usable: {line}");
    let j = tfbench_env(&[("TFBENCH_MAX_ISA", "scalar")], &["sysinfo", "--format", "json"]);
    let v = json(&j);
    assert_eq!(v["environment"]["max_isa"], "scalar");
    assert_eq!(v["isa_usable"], serde_json::json!([]));
    // Empty counts as unset, whatever cap this test process runs under.
    let native = json(&tfbench_env(&[("TFBENCH_MAX_ISA", "")], &["sysinfo", "--format", "json"]));
    assert_eq!(native["environment"]["max_isa"], "native");
    for bad in ["avx3", "AVX-512", "sse"] {
        let r = tfbench_env(&[("TFBENCH_MAX_ISA", bad)], &["list", "--suite", "quant"]);
        assert_usage_error(&r, &["TFBENCH_MAX_ISA", "scalar, avx2, avx512, native"]);
    }
}
