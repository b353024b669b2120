//! `tfbench list`, `run` and `sysinfo` through the real binary.

mod common;
use common::*;
use serde_json::Value;

/// Two cheap cases, exact ids, so the runs stay under a second.
const SMALL: &str = "tensor/binary/op=(add|mul),shape=100x100$";

#[test]
fn list_shows_suites_benchmarks_and_cases() {
    let r = tfbench(&["list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("tensor ("), "{}", &r.stdout[..200.min(r.stdout.len())]);
    for b in ["creation", "binary", "unary", "reduction", "matmul", "bmm", "half_convert", "half_add"] {
        assert!(r.stdout.contains(&format!("\n  {b} (")), "benchmark {b} missing from list");
    }
    assert!(r.stdout.contains("tensor/matmul/impl=gemm,shape=1024x1024x1024,threads=all"));
}

#[test]
fn list_json_matches_the_filters() {
    let r = tfbench(&["list", "--suite", "tensor", "--format", "json", "matmul"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let suites = v["suites"].as_array().expect("suites");
    assert_eq!(suites.len(), 1);
    let ids: Vec<&str> = suites[0]["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()))
        .collect();
    assert_eq!(ids.len() as u64, v["cases"].as_u64().unwrap());
    assert!(!ids.is_empty() && ids.iter().all(|i| i.contains("matmul")));
    // --skip removes; --exact keeps exactly one.
    let skipped = tfbench(&["list", "--format", "json", "matmul", "--skip", "threads=1"]);
    let v2 = json(&skipped);
    assert_eq!(v2["cases"].as_u64().unwrap() * 2, v["cases"].as_u64().unwrap());
    let exact = tfbench(&["list", "--format", "json", "--exact", "tensor/binary/op=add,shape=100x100"]);
    let v3 = json(&exact);
    assert_eq!(v3["cases"], 1);
}

#[test]
fn run_json_has_schema_samples_estimates_and_verification() {
    let r = quick_run(SMALL, &["--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["schema_version"], 1);
    assert!(v["environment"]["cpu_model"].is_string());
    assert!(v["harness"]["timer_resolution_ns"].as_f64().unwrap() > 0.0);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        assert_eq!(c["status"]["state"], "ok");
        assert_eq!(c["verification"]["passed"], true);
        let samples = c["samples"].as_array().unwrap();
        assert!(samples.len() >= 3 && samples.len() <= 5, "{}", samples.len());
        assert!(
            samples
                .iter()
                .all(|s| s["iterations"].as_u64().unwrap() >= 1 && s["nanos"].as_f64().unwrap() > 0.0)
        );
        let m = &c["estimates"]["median"];
        let (lo, pt, hi) =
            (m["lower"].as_f64().unwrap(), m["point"].as_f64().unwrap(), m["upper"].as_f64().unwrap());
        assert!(lo <= pt && pt <= hi && pt > 0.0);
        assert!(c["throughput"].as_array().unwrap().iter().any(|t| t["kind"] == "flops"));
        assert!(c["alloc"]["allocs_per_iter"].is_number(), "the binary counts allocations");
    }
    // Progress went to stderr, one line per case.
    assert_eq!(r.stderr.lines().filter(|l| l.starts_with('[')).count(), 2, "{}", r.stderr);
}

#[test]
fn every_format_parses_back() {
    let jsonl = quick_run(SMALL, &["--format", "jsonl"]);
    assert_eq!(jsonl.code, 0, "{}", jsonl.stderr);
    let lines: Vec<Value> =
        jsonl.stdout.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["run", "case", "case", "summary"]);
    assert_eq!(lines[3]["cases"], 2);

    let csv = quick_run(SMALL, &["--format", "csv"]);
    let rows: Vec<&str> = csv.stdout.lines().collect();
    assert_eq!(rows.len(), 3, "{}", csv.stdout);
    let header: Vec<&str> = rows[0].split(',').collect();
    let median_col = header.iter().position(|h| *h == "median_ns").expect("median_ns column");
    for row in &rows[1..] {
        let fields = parse_csv_row(row);
        assert_eq!(fields.len(), header.len(), "{row}");
        assert!(fields[0].starts_with("tensor/binary/op=") && fields[0].contains(','), "{row}");
        assert!(fields[median_col].parse::<f64>().is_ok_and(|x| x > 0.0), "{row}");
    }

    let md = quick_run(SMALL, &["--format", "markdown"]);
    assert!(md.stdout.lines().any(|l| l.starts_with("| ") && l.contains("case")), "{}", md.stdout);
    assert_eq!(
        md.stdout.lines().filter(|l| l.starts_with("| `tensor/") || l.starts_with("| tensor/")).count(),
        2
    );

    let bencher = quick_run(SMALL, &["--format", "bencher"]);
    let re = regex::Regex::new(r"^test (\S+) \.\.\. bench:\s+([\d,]+) ns/iter \(\+/- ([\d,]+)\)$").unwrap();
    let hits = bencher.stdout.lines().filter(|l| re.is_match(l)).count();
    assert_eq!(hits, 2, "{}", bencher.stdout);

    let table = quick_run(SMALL, &[]);
    assert!(table.stdout.contains("tensor/binary/op=add,shape=100x100") && table.stdout.contains("median"));
}

#[test]
fn output_file_gets_the_format_and_stdout_the_table() {
    let dir = scratch("output-file");
    let path = dir.join("results.json");
    let p = path.display().to_string();
    let r = quick_run(SMALL, &["--output", &p]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("median"), "table on stdout");
    let v = json_file(&path);
    assert_eq!(v["cases"].as_array().unwrap().len(), 2);
    // No temporary files are left beside it.
    let leftovers: Vec<_> =
        std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.file_name() != "results.json").collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_failing_case_keeps_the_others_and_exits_3() {
    let dir = scratch("failing-case");
    // Every value is valid on its own (so the plan is built), but q4_k needs
    // K to be a multiple of 256: that case fails at prepare, the others still
    // run and are written.
    let cfg = write(
        &dir,
        "bad-shape.toml",
        "[suites.quant.benchmarks.linear]\nformat = [\"f32\", \"q4_k\"]\nshape = \"1x64x8\"\nthreads = 1\n",
    );
    let out = dir.join("r.json").display().to_string();
    let r = tfbench(&[
        "run",
        "--suite",
        "tensor",
        "--suite",
        "quant",
        "--quick",
        "--no-probe",
        "--config",
        &cfg,
        "--output",
        &out,
        "quant/linear/|tensor/binary/op=add,shape=100x100$",
    ]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let v = json_file(&dir.join("r.json"));
    let cases = v["cases"].as_array().unwrap();
    let failed: Vec<&Value> = cases.iter().filter(|c| c["status"]["state"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{cases:?}");
    assert_eq!(failed[0]["status"]["phase"], "prepare");
    assert!(failed[0]["id"].as_str().unwrap().contains("q4_k"));
    assert!(cases.iter().filter(|c| c["status"]["state"] == "ok").count() >= 2);
    assert!(r.stdout.contains("FAILED"), "{}", r.stdout);
}

#[test]
fn rounds_and_shuffle_pool_samples_per_case() {
    let r = quick_run(SMALL, &["--format", "json", "--rounds", "2", "--shuffle", "--seed", "7"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    for c in v["cases"].as_array().unwrap() {
        let rounds: std::collections::BTreeSet<u64> =
            c["samples"].as_array().unwrap().iter().map(|s| s["round"].as_u64().unwrap()).collect();
        assert_eq!(rounds.into_iter().collect::<Vec<_>>(), [0, 1]);
    }
}

#[test]
fn placements_spread_small_cpu_cases_over_copies_and_say_so() {
    // add 100x100 is small and prepared in microseconds (well inside the
    // 50 ms bound on any runner): 3 copies, each verified, every sample from
    // one of them. mul 4096x4096 moves 192 MiB per iteration and copies its
    // own buffers: spread too, where two more copies fit in a quarter of the
    // free memory. transpose 4096x4096 is as large and cannot copy itself:
    // never spread.
    let r = tfbench(&[
        "run",
        "--no-probe",
        "--format",
        "json",
        "--sample-size",
        "6",
        "--warm-up-time",
        "0.01",
        "--measurement-time",
        "0.05",
        "--placements",
        "3",
        "tensor/(binary/op=(add|mul),shape=(100x100|4096x4096)|transpose/shape=4096x4096)$",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let case = |id: &str| v["cases"].as_array().unwrap().iter().find(|c| c["id"] == id).cloned().unwrap();
    let small = case("tensor/binary/op=add,shape=100x100");
    assert_eq!(small["sampling"]["placements"], 3, "{small}");
    let reference = small["verification"]["reference"].as_str().unwrap();
    assert!(reference.contains("each of 3 placements"), "{reference}");
    let copied = case("tensor/binary/op=mul,shape=4096x4096");
    // Two more copies of 192 MiB need 1.5 GiB free; with 4 GiB free the
    // case is spread whatever else the runner does meanwhile.
    if tfbench::util::mem_available().is_some_and(|b| b >= 4 << 30) {
        assert_eq!(copied["sampling"]["placements"], 3, "{}", copied["sampling"]);
        let reference = copied["verification"]["reference"].as_str().unwrap();
        assert!(reference.contains("each of 3 placements"), "{reference}");
    }
    let large = case("tensor/transpose/shape=4096x4096");
    assert!(large["sampling"].get("placements").is_none(), "{}", large["sampling"]);
    // Bad values are refused with the range, from the flag and from a config.
    assert_usage_error(&tfbench(&["run", "--no-probe", "--placements", "0"]), &["placements", "1 to 16"]);
    let dir = scratch("placements");
    let p = write(&dir, "p.toml", "[harness]\nplacements = 99\n");
    assert_usage_error(&tfbench(&["list", "--config", &p]), &["p.toml:2:1", "placements", "1 to 16"]);
}

#[test]
fn max_time_cut_is_reported() {
    // 1024^3 matmul on one thread takes several ms per iteration; 0.05 s
    // cannot hold 50 samples.
    let r = tfbench(&[
        "run",
        "--no-probe",
        "--format",
        "json",
        "--sample-size",
        "50",
        "--warm-up-time",
        "0.01",
        "--measurement-time",
        "5",
        "--max-time",
        "0.05",
        "--exact",
        "tensor/matmul/impl=gemm,shape=512x512x512,threads=1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let c = &v["cases"][0];
    assert_eq!(c["sampling"]["stopped_by"], "max_time");
    assert!(c["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("max-time")));
}

#[test]
fn sysinfo_describes_the_machine() {
    let r = tfbench(&["sysinfo", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert!(!v["environment"]["cpu_model"].as_str().unwrap().is_empty());
    assert!(v["fingerprint"].as_str().is_some_and(|f| !f.is_empty()));
    // Huge-page requests are on unless switched off, and the switch shows.
    assert_eq!(v["environment"]["huge_pages_requested"], true);
    let off = json(&tfbench_env(&[("TFBENCH_HUGE_PAGES", "0")], &["sysinfo", "--format", "json"]));
    assert_eq!(off["environment"]["huge_pages_requested"], false);
    // The allocator under the counters: mimalloc unless asked for glibc.
    assert_eq!(v["environment"]["allocator"], "mimalloc");
    let sys = json(&tfbench_env(&[("TFBENCH_ALLOCATOR", "system")], &["sysinfo", "--format", "json"]));
    assert_eq!(sys["environment"]["allocator"], "system");
    let bad = tfbench_env(&[("TFBENCH_ALLOCATOR", "jemalloc")], &["sysinfo", "--format", "json"]);
    assert_usage_error(&bad, &["TFBENCH_ALLOCATOR=\"jemalloc\"", "system, mimalloc"]);
    let t = tfbench(&["sysinfo"]);
    assert_eq!(t.code, 0);
    assert!(t.stdout.to_lowercase().contains("cpu"));
}

/// Minimal RFC 4180 row reader: quoted fields may hold commas and "" quotes.
fn parse_csv_row(row: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}
