//! `sysinfo --probe` measures and caches limits; later runs show % of peak,
//! roofline classes and the performance target checks.

mod common;
use common::*;
use std::path::Path;

/// The probe's load test hook (`src/app/sysinfo.rs`): each try's load is
/// taken to be this share of a core, not the machine's real (and
/// unpredictable) load, so what is cached is decided deterministically.
const HOOK: &str = "TFBENCH_INJECT_PROBE_LOAD";

/// tfbench with its probe cache in `cache` and the load hook set to `load`.
fn with_load(cache: &Path, load: &str, args: &[&str]) -> Run {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(args)
        .env("TFBENCH_CACHE_DIR", cache)
        .env(HOOK, load)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .output()
        .expect("run tfbench");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`with_load`] with a clean probe: what these tests assume of an idle machine.
fn tfbench_clean(cache: &Path, args: &[&str]) -> Run {
    with_load(cache, "0", args)
}

/// The probe cache files in `cache`.
fn cached_probes(cache: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache)
        .map(|d| {
            d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect()
        })
        .unwrap_or_default()
}

/// A quick run of one CPU case with % of peak (add on 4096x4096 declares bytes).
const ADD: &str = "tensor/binary/op=add,shape=4096x4096$";

#[test]
fn probe_is_cached_and_used_by_run() {
    let cache = scratch("probe-cache");
    let r = tfbench_clean(&cache, &["sysinfo", "--probe", "--format", "json"]);
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
    // A clean probe is cached, with when and under what load it ran.
    assert_eq!(v["probe_load"], "clean");
    assert_eq!(v["machine_limits_cached"], true);
    assert_eq!(l["load"]["disturbed"], serde_json::Value::Null, "{l}");
    assert_eq!(l["load"]["injected"], "0", "{l}");
    assert!(r.stderr.contains(HOOK), "the hook is announced: {}", r.stderr);

    // sysinfo without --probe reads the cache back.
    let again = tfbench_clean(&cache, &["sysinfo", "--format", "json"]);
    let v2 = json(&again);
    assert_eq!(v2["machine_limits"], *l);

    let run = tfbench_clean(
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
    let table = tfbench_clean(
        &cache,
        &["run", "--quick", "--sample-size", "3", "tensor/binary/op=add,shape=4096x4096$"],
    );
    assert!(table.stdout.contains("peak"), "{}", table.stdout);

    // `run --probe` measures afresh although a probe is cached, uses the new
    // figures and replaces the cache with them.
    let fresh = tfbench_clean(
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
    let cached = json(&tfbench_clean(&cache, &["sysinfo", "--format", "json"]));
    assert_eq!(cached["machine_limits"], new, "the cache holds the new probe");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "still one cache file");
    let clash = tfbench_clean(&cache, &["run", "--probe", "--no-probe", "tensor/binary"]);
    assert_eq!(clash.code, 2, "{}", clash.stderr);
}

#[test]
fn a_disturbed_probe_is_used_uncached_with_notes_and_a_clean_try_is_cached() {
    let cache = scratch("probe-disturbed");
    // Every try disturbed: three tries, the figures shown but not cached.
    let r = with_load(&cache, "0.6", &["sysinfo", "--probe", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("try 2 of 3") && r.stderr.contains("try 3 of 3"), "{}", r.stderr);
    assert!(r.stderr.contains("NOT cached"), "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["probe_load"], "disturbed");
    assert_eq!(v["machine_limits_cached"], false);
    let load = &v["machine_limits"]["load"];
    assert!(load["disturbed"].as_f64().is_some_and(|d| (d - 0.6).abs() < 1e-9), "{load}");
    assert_eq!(load["injected"], "0.6");
    assert!(cached_probes(&cache).is_empty(), "nothing cached: {:?}", cached_probes(&cache));
    let shown = json(&tfbench_clean(&cache, &["sysinfo", "--format", "json"]));
    assert_eq!(shown["machine_limits"], serde_json::Value::Null);
    assert_eq!(shown["probe_load"], serde_json::Value::Null);

    // A run on a disturbed probe: % of peak and roofline carry a note, in
    // the JSON and in the table, and the table's limits line says so.
    let out = scratch("probe-disturbed-out").join("disturbed.json");
    let args = ["run", "--probe", "--quick", "--sample-size", "3", "-o", out.to_str().unwrap(), ADD];
    let run = with_load(&cache, "0.6", &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("NOT cached"), "{}", run.stderr);
    assert!(run.stdout.contains("probe disturbed"), "{}", run.stdout);
    assert!(
        run.stdout.contains("load DISTURBED, other work took 60% of a core, not cached"),
        "{}",
        run.stdout
    );
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let share = saved["machine_limits"]["load"]["disturbed"].as_f64();
    assert!(share.is_some_and(|d| (d - 0.6).abs() < 1e-9), "{share:?}");
    let case = &saved["cases"][0];
    assert!(case["throughput"].as_array().unwrap().iter().any(|t| t["pct_of_peak"].as_f64().is_some()));
    let notes: Vec<&str> = case["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("probe disturbed (other work took 60% of a core")),
        "{notes:?}"
    );
    assert!(cached_probes(&cache).is_empty(), "a run caches no disturbed probe either");

    // Disturbed, then clean on the second try: that one is cached.
    let r = with_load(&cache, "0.6,0", &["sysinfo", "--probe", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("try 2 of 3") && !r.stderr.contains("try 3 of 3"), "{}", r.stderr);
    let v = json(&r);
    assert_eq!((&v["probe_load"], &v["machine_limits_cached"]), (&"clean".into(), &true.into()));
    assert_eq!(v["machine_limits"]["load"]["attempt"], 2);
    assert_eq!(cached_probes(&cache).len(), 1);
    // A bad hook value is a usage error.
    let bad = with_load(&cache, "lots", &["sysinfo", "--probe"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains(HOOK), "{}", bad.stderr);
}

#[test]
fn a_probe_cached_before_load_was_recorded_reads_as_unknown_and_is_probed_again_once() {
    let cache = scratch("probe-old-format");
    assert_eq!(tfbench_clean(&cache, &["sysinfo", "--probe"]).code, 0);
    let [file] = cached_probes(&cache).try_into().expect("one cache file");
    // What an older tfbench wrote: the same figures, no load.
    let mut old: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("load");
    std::fs::write(&file, serde_json::to_string_pretty(&old).unwrap()).unwrap();

    let r = tfbench_clean(&cache, &["sysinfo", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!((&v["probe_load"], &v["machine_limits_cached"]), (&"unknown".into(), &true.into()));
    assert_eq!(v["machine_limits"], old);
    assert!(r.stderr.contains("does not record the load"), "{}", r.stderr);
    let table = tfbench_clean(&cache, &["sysinfo"]);
    assert!(table.stdout.contains(old["measured_at"].as_str().unwrap()), "{}", table.stdout);
    assert!(table.stdout.contains("unknown (not recorded"), "{}", table.stdout);

    let quick = |load: &str, extra: &[&str]| {
        let mut args = vec!["run", "--quick", "--sample-size", "3", "-f", "json"];
        args.extend_from_slice(extra);
        args.push(ADD);
        let r = with_load(&cache, load, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let limits = json(&r)["machine_limits"].clone();
        (r, limits)
    };
    // --no-probe, or a platform that cannot read the load: used as it is.
    for (load, extra) in [("0", &["--no-probe"][..]), ("unknown", &[][..])] {
        let (r, limits) = quick(load, extra);
        assert_eq!(limits, old, "{load}");
        assert!(!r.stderr.contains("probing again"), "{}", r.stderr);
    }
    // The re-probe is disturbed: the old probe is kept, file and all.
    let (r, limits) = quick("0.6", &[]);
    assert!(
        r.stderr.contains("probing again once") && r.stderr.contains("keeping the cached probe"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("try 2 of"), "one try only: {}", r.stderr);
    assert_eq!(limits, old);
    let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(kept, old);
    // A clean re-probe replaces it, and is not taken again afterwards.
    let (r, limits) = quick("0", &[]);
    assert!(r.stderr.contains("probing again once"), "{}", r.stderr);
    assert_eq!(limits["load"]["disturbed"], serde_json::Value::Null, "{limits}");
    assert_ne!(limits["measured_at"], old["measured_at"]);
    let cached = json(&tfbench_clean(&cache, &["sysinfo", "--format", "json"]));
    assert_eq!((&cached["machine_limits"], &cached["probe_load"]), (&limits, &"clean".into()));
    let (r, again) = quick("0", &[]);
    assert!(!r.stderr.contains("probing again"), "{}", r.stderr);
    assert_eq!(again, limits);
}
