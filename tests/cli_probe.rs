//! `sysinfo --probe` measures and caches limits; later runs show % of peak,
//! roofline classes and the performance target checks.

mod common;
use common::*;

#[test]
fn probe_is_cached_and_used_by_run() {
    let cache = scratch("probe-cache");
    let r = tfbench_in(&cache, &["sysinfo", "--probe", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let l = &v["machine_limits"];
    for k in [
        "peak_flops_one_core",
        "peak_flops_all_cores",
        "triad_bandwidth_all_threads",
        "copy_bandwidth_all_threads",
    ] {
        assert!(l[k].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{k}: {l}");
    }
    // All cores beat one on a quiet machine; with other processes running
    // the all-core figure can fall below it, so only a gross error fails.
    let (all, one) =
        (l["peak_flops_all_cores"].as_f64().unwrap(), l["peak_flops_one_core"].as_f64().unwrap());
    assert!(all >= 0.5 * one, "all cores {all} vs one core {one}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "one cache file");

    // sysinfo without --probe reads the cache back.
    let again = tfbench_in(&cache, &["sysinfo", "--format", "json"]);
    let v2 = json(&again);
    assert_eq!(v2["machine_limits"], *l);

    let run = tfbench_in(
        &cache,
        &[
            "run",
            "--quick",
            "--sample-size",
            "5",
            "--format",
            "json",
            "tensor/(binary/op=add,shape=4096x4096|matmul/impl=gemm,shape=256x256x256,threads=all)$",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json(&run);
    assert_eq!(v["machine_limits"], *l);
    for c in v["cases"].as_array().unwrap() {
        assert!(c["bound"].is_string(), "roofline class for {}", c["id"]);
        let pct = c["throughput"].as_array().unwrap().iter().find_map(|t| t["pct_of_peak"].as_f64());
        assert!(pct.is_some_and(|p| p > 0.0), "{}", c["id"]);
    }
    let targets = v["targets"].as_array().unwrap();
    assert!(!targets.is_empty(), "target checks reported");
    for t in targets {
        let (m, lim, ratio) =
            (t["measured"].as_f64().unwrap(), t["limit"].as_f64().unwrap(), t["ratio"].as_f64().unwrap());
        assert!((m / lim - ratio).abs() < 1e-9);
    }
    // The table shows them too.
    let table = tfbench_in(
        &cache,
        &["run", "--quick", "--sample-size", "3", "tensor/binary/op=add,shape=4096x4096$"],
    );
    assert!(table.stdout.contains("peak"), "{}", table.stdout);

    // `run --probe` measures afresh although a probe is cached, uses the new
    // figures and replaces the cache with them.
    let fresh = tfbench_in(
        &cache,
        &[
            "run",
            "--probe",
            "--quick",
            "--sample-size",
            "3",
            "-f",
            "json",
            "tensor/binary/op=add,shape=4096x4096$",
        ],
    );
    assert_eq!(fresh.code, 0, "{}", fresh.stderr);
    assert!(fresh.stderr.contains("--probe"), "{}", fresh.stderr);
    let new = json(&fresh)["machine_limits"].clone();
    assert_ne!(new["measured_at"], l["measured_at"], "a new probe");
    let cached = json(&tfbench_in(&cache, &["sysinfo", "--format", "json"]));
    assert_eq!(cached["machine_limits"], new, "the cache holds the new probe");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "still one cache file");
    let clash = tfbench_in(&cache, &["run", "--probe", "--no-probe", "tensor/binary"]);
    assert_eq!(clash.code, 2, "{}", clash.stderr);
}
