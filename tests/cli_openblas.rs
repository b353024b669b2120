//! `impl=openblas` in the tensor suite: OpenBLAS loaded at run time, run
//! beside tfbench's own GEMM, and skipped (never failed) with a way to get
//! it when it cannot load.

mod common;
use common::*;
use std::path::Path;

const ONE: &str = "tensor/matmul/impl=openblas,shape=64x64x64,threads=1";
const ALL: &str = "tensor/matmul/impl=openblas,shape=256x256x256,threads=all";

/// A JSON run (quick profile) of exactly the cases `ids` (no regex
/// characters in them; each in the quick grid).
fn run_exact(env: &[(&str, &str)], ids: &[&str]) -> Run {
    let filter = format!("^({})$", ids.join("|"));
    tfbench_env(env, &["run", "--quick", "--no-probe", "--sample-size", "3", "--format", "json", &filter])
}

#[test]
fn the_fetched_openblas_runs_verified_beside_the_other_gemms() {
    if let Some(other) = std::env::var_os("TFBENCH_OPENBLAS") {
        eprintln!(
            "SKIPPED: TFBENCH_OPENBLAS={} names the library to use, not the fetched one",
            other.display()
        );
        return;
    }
    // Found the way the binary finds it (same environment and working folder).
    let lib = match tfbench::data::find(tfbench::kernels::openblas::FETCHED) {
        Ok(lib) => lib,
        Err(why) => {
            eprintln!("SKIPPED: {why} (CI fetches it)");
            return;
        }
    };
    let data = lib.parent().and_then(Path::parent).expect("<data>/openblas/<lib>");
    let r = run_exact(
        &[("TFBENCH_DATA_DIR", data.to_str().unwrap())],
        &[ONE, ALL, "tensor/matmul/impl=gemm,shape=64x64x64,threads=1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for c in cases {
        assert_eq!(c["status"]["state"], "ok", "{}: {}", c["id"], c["status"]);
        assert_eq!(c["verification"]["passed"], true);
        assert!(c["throughput"].as_array().unwrap().iter().any(|t| t["kind"] == "flops"), "{c}");
    }
    for c in cases.iter().filter(|c| c["id"].as_str().unwrap().contains("openblas")) {
        // Which OpenBLAS ran, and from where, is part of the result.
        let detail = c["verification"]["detail"].as_str().unwrap();
        assert!(detail.contains("OpenBLAS 0.3.") && detail.contains("libscipy_openblas.so"), "{detail}");
    }
}

#[test]
fn without_a_library_the_cases_are_skipped_with_a_way_to_get_one() {
    let r = run_exact(&[("TFBENCH_OPENBLAS", "/nonexistent/libopenblas.so")], &[ONE, ALL]);
    assert_eq!(r.code, 0, "skipped is not failed: {}", r.stderr);
    let v = json(&r);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        assert_eq!(c["status"]["state"], "skipped", "{}", c["status"]);
        let reason = c["status"]["reason"].as_str().unwrap();
        for needle in
            ["impl=openblas", "/nonexistent/libopenblas.so", "fetch-test-data.sh", "TFBENCH_OPENBLAS"]
        {
            assert!(reason.contains(needle), "reason lacks {needle:?}: {reason}");
        }
    }
    // The table says so too, in the case's row.
    let t = tfbench_env(
        &[("TFBENCH_OPENBLAS", "/nonexistent/libopenblas.so")],
        &["run", "--quick", "--no-probe", "--sample-size", "3", "--exact", ONE],
    );
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stdout.contains("skipped"), "{}", t.stdout);
    assert!(t.stdout.lines().any(|l| l.contains(ONE) && l.contains("skipped")), "{}", t.stdout);
    // The loader's message names the path once, not twice.
    let reason = cases[0]["status"]["reason"].as_str().unwrap();
    assert_eq!(reason.matches("/nonexistent/libopenblas.so").count(), 1, "{reason}");
}
