//! `tfbench sysinfo --kernels` through the real binary: the quantized
//! kernels' dispatch table lists every format's decode (gemv) and prefill
//! (gemm) kernel per ISA level, and with the cap at `avx2` on a CPU that
//! has AVX2 (what an AVX2-only CPU runs) none of them is scalar code.

mod common;
use common::*;
use serde_json::Value;

/// Whether this CPU has the AVX2 kernels' features (AVX2, FMA, F16C).
fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Every quantized format's kernels are listed, each with one
/// implementation per level from the cap down to `scalar`.
fn check_shape(v: &Value) -> &Vec<Value> {
    let levels: Vec<&str> = v["levels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(levels.last(), Some(&"scalar"), "{v}");
    assert_eq!(levels.first().copied(), v["isa_cap"].as_str(), "{v}");
    let kernels = v["kernels"].as_array().unwrap();
    for f in ["q4_0", "q4_1", "q4_k", "q6_k", "q8_0", "int8", "ternary", "f16", "bf16"] {
        for op in ["gemv", "gemm"] {
            assert!(kernels.iter().any(|k| k["format"] == f && k["op"] == op), "{f} {op} missing: {v}");
        }
    }
    for k in kernels {
        let imp = k["impl"].as_object().unwrap();
        assert_eq!(imp.len(), levels.len(), "{k}");
        for l in &levels {
            assert!(imp[*l].as_str().is_some_and(|s| !s.is_empty()), "{k}");
        }
    }
    kernels
}

#[test]
fn kernels_table_has_no_scalar_fallback_at_avx2() {
    if !cpu_has_avx2() {
        eprintln!("this CPU has no AVX2/FMA/F16C: checking only the table's shape");
        let r = tfbench(&["sysinfo", "--kernels", "--format", "json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        check_shape(&json(&r));
        return;
    }
    let r = tfbench_env(&[("TFBENCH_MAX_ISA", "avx2")], &["sysinfo", "--kernels", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["isa_cap"], "avx2", "{v}");
    for k in check_shape(&v) {
        let at = k["impl"]["avx2"].as_str().unwrap();
        assert!(!at.contains("scalar"), "falls back to scalar code at avx2: {k}");
        let decode = k["op"] == "gemv";
        if decode {
            assert_eq!(at, "avx2", "{k}");
            assert_eq!(k["impl"]["scalar"], "scalar", "{k}");
        }
    }
    // The text table: a header naming the cap and one line per kernel.
    let t = tfbench_env(&[("TFBENCH_MAX_ISA", "avx2")], &["sysinfo", "--kernels"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.contains("avx2 (cap in force)") && t.stdout.contains("q4_k gemv (int8 act)"),
        "{}",
        t.stdout
    );
    let q41 = t.stdout.lines().find(|l| l.starts_with("q4_1 gemv (int8 act)")).expect("q4_1 row");
    assert!(q41.split_whitespace().any(|w| w == "avx2"), "{q41}");
}

#[test]
fn kernels_table_at_the_machines_own_level() {
    let r = tfbench(&["sysinfo", "--kernels", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let kernels = check_shape(&v);
    if cpu_has_avx2() && v["isa_cap"] != "scalar" {
        let cap = v["isa_cap"].as_str().unwrap();
        assert!(kernels.iter().all(|k| !k["impl"][cap].as_str().unwrap().contains("scalar")), "{v}");
    }
    let both = tfbench(&["sysinfo", "--kernels", "--probe"]);
    assert_ne!(both.code, 0, "--kernels with --probe is refused");
    assert!(both.stderr.contains("--kernels"), "{}", both.stderr);
}
