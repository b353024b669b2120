//! The cache-aware roofline and thread sweeps, through the real binary: the
//! probe measures every memory level and is cached per thread count, each
//! CPU case names its roof, and `--threads 1,2` sweeps with speed-ups and
//! efficiencies, all in the JSON and the HTML report.
//!
//! No test assumes the machine is idle: a `% of peak` above 105% is
//! allowed here, but then it must be flagged as a measurement problem.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

/// tfbench with its cache in `cache` and the probe's load taken as clean
/// (the load test hook of `src/app/sysinfo.rs`), so caching is decided
/// deterministically on a busy machine.
fn clean(cache: &Path, args: &[&str]) -> Run {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(args)
        .env("TFBENCH_CACHE_DIR", cache)
        .env("TFBENCH_INJECT_PROBE_LOAD", "0")
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

const ROOFS: [&str; 5] = ["L1", "L2", "L3", "DRAM", "FMA"];

/// Every case's roof is named, and a `% of peak` above 105% is flagged.
fn check_roofs(v: &Value) {
    for c in v["cases"].as_array().expect("cases") {
        if c["status"] != "ok" {
            continue;
        }
        let roof = &c["roof"];
        let name = roof["name"].as_str().unwrap_or_else(|| panic!("no roof for {}: {c}", c["id"]));
        assert!(ROOFS.contains(&name), "{name}");
        let pct = c["throughput"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["pct_of_peak"].as_f64())
            .fold(0.0, f64::max);
        let notes = c["notes"].to_string();
        if pct > 105.0 {
            assert_eq!(roof["suspect"], true, "{}: {pct}% not flagged", c["id"]);
            assert!(notes.contains("measurement problem"), "{}: {notes}", c["id"]);
        } else {
            assert!(!notes.contains("measurement problem"), "{}: {notes}", c["id"]);
        }
    }
}

#[test]
fn the_probe_measures_every_level_and_cases_name_their_roof() {
    let cache = scratch("roofline-probe");
    let r = clean(&cache, &["sysinfo", "--probe", "--threads", "2", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let levels = json(&r)["machine_limits"]["levels"].clone();
    let names: Vec<&str> = levels.as_array().unwrap().iter().map(|l| l["level"].as_str().unwrap()).collect();
    assert_eq!(names, ["L1", "L2", "L3", "DRAM"]);
    for l in levels.as_array().unwrap() {
        for k in ["read", "copy", "triad"] {
            for t in ["one_thread", "all_threads"] {
                let v = l[format!("{k}_{t}")].as_f64().unwrap_or(0.0);
                assert!(v.is_finite() && v > 0.0, "{k}_{t} of {l}");
            }
        }
    }
    let files: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() == 1 && files[0].ends_with("-t2.json"), "keyed by threads: {files:?}");

    let (results, html) = (cache.join("results.json"), cache.join("report.html"));
    let run = clean(
        &cache,
        &[
            "run",
            "--quick",
            "--threads",
            "2",
            "--sample-size",
            "3",
            "-f",
            "json",
            "-o",
            results.to_str().unwrap(),
            "(memory/bandwidth/kernel=triad,level=(l1|dram),threads=1|tensor/matmul/impl=gemm,shape=256x256x256,threads=all)$",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json_file(&results);
    assert_eq!(v["cases"].as_array().unwrap().len(), 3);
    check_roofs(&v);
    let roof = |id: &str| {
        let c =
            v["cases"].as_array().unwrap().iter().find(|c| c["id"].as_str().unwrap().contains(id)).unwrap();
        c["roof"]["name"].as_str().unwrap().to_string()
    };
    assert_eq!(roof("level=l1"), "L1");
    assert_eq!(roof("level=dram"), "DRAM");
    assert_eq!(roof("matmul"), "FMA");
    let report = tfbench(&["report", results.to_str().unwrap(), "--html", html.to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("id=\"roofline\"") && page.contains("class=\"roofline\""), "roofline chart");
    assert!(page.contains("FMA "), "the flat roof is labelled");
}

#[test]
fn old_and_other_thread_probes_are_probed_again() {
    let cache = scratch("roofline-old");
    let r = clean(&cache, &["sysinfo", "--probe", "--threads", "1", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A one-thread probe never serves a two-thread run (it read 166% of peak).
    let run = clean(
        &cache,
        &[
            "run",
            "--quick",
            "--threads",
            "2",
            "--sample-size",
            "3",
            "-f",
            "json",
            "tensor/binary/op=add,shape=4096x4096$",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("measuring this machine's peak"), "{}", run.stderr);
    assert_eq!(json(&run)["machine_limits"]["threads"], 2);
    // A probe cached before the levels existed is taken again, not used as is.
    let file = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with("-t2.json")));
    let file = file.expect("the two-thread probe is cached");
    let mut old: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("levels");
    std::fs::write(&file, serde_json::to_string(&old).unwrap()).unwrap();
    let again = clean(
        &cache,
        &[
            "run",
            "--quick",
            "--threads",
            "2",
            "--sample-size",
            "3",
            "-f",
            "json",
            "tensor/binary/op=add,shape=4096x4096$",
        ],
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stderr.contains("bandwidth of each cache level"), "{}", again.stderr);
    let v = json(&again);
    assert_eq!(v["machine_limits"]["levels"].as_array().map(Vec::len), Some(4));
    check_roofs(&v);
}

#[test]
fn a_thread_sweep_reports_speedup_and_efficiency() {
    let cache = scratch("roofline-sweep");
    let (results, html) = (cache.join("sweep.json"), cache.join("sweep.html"));
    let r = clean(
        &cache,
        &[
            "run",
            "--quick",
            "--no-probe",
            "--threads",
            "1,2",
            "--sample-size",
            "3",
            "-f",
            "json",
            "-o",
            results.to_str().unwrap(),
            "tensor/matmul/impl=gemm,shape=256x256x256",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json_file(&results);
    let ids: Vec<&str> = v["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "tensor/matmul/impl=gemm,shape=256x256x256,threads=1",
            "tensor/matmul/impl=gemm,shape=256x256x256,threads=2"
        ]
    );
    for c in v["cases"].as_array().unwrap() {
        let s = &c["scaling"];
        assert_eq!(s["group"], "tensor/matmul/impl=gemm,shape=256x256x256");
        assert_eq!(s["base_threads"], 1);
        let (speedup, eff) = (s["speedup"].as_f64().unwrap(), s["efficiency"].as_f64().unwrap());
        let t = s["threads"].as_f64().unwrap();
        assert!(speedup > 0.0 && (eff - speedup / t).abs() < 1e-9, "{s}");
    }
    assert_eq!(v["harness"]["threads"], 2, "the pool is the widest step");
    let report = tfbench(&["report", results.to_str().unwrap(), "--html", html.to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("Thread scaling"), "scaling table in the report");
}

#[test]
fn a_bad_thread_list_is_a_usage_error() {
    for bad in ["0", "1,,2", "two", "1,0"] {
        let r = tfbench(&["run", "--threads", bad, "--no-probe", "tensor/binary"]);
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert!(r.stderr.contains("sweep like 1,2,4"), "{bad}: {}", r.stderr);
    }
}
