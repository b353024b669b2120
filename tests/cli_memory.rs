//! The memory suite through the real binary: `list`, a filtered quick run
//! with JSON parsed back, metrics and the leak watch on every case.

mod common;
use common::*;

/// Cheap cases from most benchmarks (the DRAM-sized ones, the latency
/// curve and the big footprints run in the ignored full-suite test).
const QUICK: &str = "memory/(alloc/allocator=(system|pool|mimalloc),size=(64|4096)$|pattern/|pool_pressure/|tracking_overhead/size=64,|alloc_overhead/allocator=pool,size=1048576|tensor_alloc/.*elements=262144|footprint/.*model=(bert-tiny|llama-7b)|bandwidth/kernel=triad,level=l1|latency/size=16384)";

#[test]
fn list_shows_the_memory_suite_and_its_cases() {
    let r = tfbench(&["list", "--suite", "memory"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("memory ("), "{}", &r.stdout[..200.min(r.stdout.len())]);
    for b in [
        "alloc",
        "pattern",
        "pool_pressure",
        "tracking_overhead",
        "tensor_alloc",
        "alloc_overhead",
        "footprint",
        "bandwidth",
        "latency",
        "cache_levels",
    ] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing");
    }
    assert!(r.stdout.contains("memory/alloc/allocator=mimalloc,size=1048576"));
    assert!(r.stdout.contains("memory/bandwidth/kernel=triad,level=dram,threads=all"));
}

#[test]
fn quick_run_verifies_every_case_and_reports_memory_figures() {
    let (r, v) = suite_json("memory", "5", &[QUICK]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 25, "{} cases", cases.len());
    for c in cases {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert_eq!(c["verification"]["passed"], true, "{id}");
        assert!(c["estimates"]["median"]["point"].as_f64().unwrap() > 0.0, "{id}");
        assert!(c["alloc"]["peak_bytes"].is_number(), "{id}: the harness's memory figures");
        // The leak watch reports on every allocating case, and nothing leaks.
        if let Some(l) = metric(c, "leaked_allocs_per_iter") {
            assert_eq!(l, 0.0, "{id} leaks");
        }
    }
    let find = |id: &str| cases.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id} missing"));
    let pool = find("memory/pattern/allocator=pool,model=gpt2-tiny,pattern=mixed,shape=4x128");
    for m in
        ["hit_rate", "fragmentation", "utilization_mean", "external_fragmentation", "leaked_allocs_per_iter"]
    {
        let x = metric(pool, m).unwrap_or_else(|| panic!("{m} missing"));
        assert!((0.0..=1.0).contains(&x), "{m} = {x}");
    }
    assert!(metric(pool, "hit_rate").unwrap() > 0.9, "a warm pool serves a repeated forward from its cache");
    let over = find("memory/alloc_overhead/allocator=pool,size=1048576");
    for m in ["touch_resident_ns", "first_touch_ns", "alloc_free_calls_ns"] {
        assert!(metric(over, m).is_some_and(|x| x > 0.0), "{m}");
    }
    let pct = metric(over, "alloc_overhead_pct").unwrap();
    let (f, t, c) = (
        metric(over, "first_touch_ns").unwrap(),
        metric(over, "touch_resident_ns").unwrap(),
        metric(over, "alloc_free_calls_ns").unwrap(),
    );
    assert!((pct - 100.0 * (c + f - t) / t).abs() < 1e-6, "the overhead is its parts' sum");
    let pressure = find("memory/pool_pressure/budget=67108864,fill=120");
    assert!(metric(pressure, "refusals_per_iter").unwrap() > 0.0, "over budget, the pool refuses");
    assert!(metric(pressure, "peak_held_over_budget").unwrap() <= 1.0);
    let under = find("memory/pool_pressure/budget=67108864,fill=50");
    assert_eq!(metric(under, "refusals_per_iter"), Some(0.0));
    let tracked = find("memory/tracking_overhead/size=64,tracker=counting");
    assert!(metric(tracked, "tracking_overhead_ns").is_some());
    let tiny = find("memory/footprint/batch=1,context=512,dtype=f16,model=bert-tiny");
    assert_eq!(metric(tiny, "allocated_for_real"), Some(1.0));
    assert_eq!(metric(tiny, "measured_peak_bytes"), metric(tiny, "footprint_bytes"));
    let big = find("memory/footprint/batch=1,context=512,dtype=f16,model=llama-7b");
    assert_eq!(metric(big, "allocated_for_real"), Some(0.0));
    assert!(big["verification"]["reference"].as_str().unwrap().contains("computed only"));
    assert_eq!(metric(big, "params"), Some(6_738_415_616.0));
}

#[test]
fn config_overrides_grids_and_bad_values_name_the_choices() {
    let dir = scratch("memory-config");
    let cfg =
        write(&dir, "mem.toml", "[suites.memory.benchmarks.alloc]\nallocator = \"jemalloc\"\nsize = 64\n");
    let r =
        tfbench(&["run", "--suite", "memory", "--quick", "--no-probe", "--config", &cfg, "memory/alloc/"]);
    // Refused while the plan is built, before anything runs.
    assert_usage_error(&r, &["mem.toml:2:", "valid: system, pool, mimalloc"]);
    let cfg =
        write(&dir, "ok.toml", "[suites.memory.benchmarks.alloc]\nallocator = \"pool\"\nsize = [128, 256]\n");
    let (r, v) = suite_json("memory", "5", &["memory/alloc/", "--config", &cfg]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ids: Vec<&str> = v["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["memory/alloc/allocator=pool,size=128", "memory/alloc/allocator=pool,size=256"]);
}

/// The whole quick suite, DRAM-sized cases and the latency curve included
/// (tens of seconds): `cargo test --release --test cli_memory -- --ignored`.
#[test]
#[ignore]
fn whole_quick_suite_runs_clean() {
    let (r, v) = suite_json("memory", "5", &["memory/"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.iter().all(|c| c["status"]["state"] == "ok" || c["status"]["state"] == "skipped"));
    let levels = cases.iter().find(|c| c["id"] == "memory/cache_levels").unwrap();
    assert!(metric(levels, "levels_detected").is_some());
}
