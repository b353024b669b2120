use super::*;
use crate::report::fixture;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tfbench-baseline-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn json(report: &RunReport) -> Value {
    serde_json::to_value(report).expect("report serializes")
}

fn err_text(r: Result<impl std::fmt::Debug>) -> String {
    format!("{:#}", r.expect_err("expected an error"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn save_load_round_trip() {
    let tmp = TempDir::new("roundtrip");
    let store = Store::new(tmp.0.join("nested/baselines"));
    let report = fixture();
    let path = store.save("main", &report).unwrap();
    assert_eq!(path, store.dir().join("main.json"));
    let b = store.load("main").unwrap();
    assert_eq!(b.schema_version, BASELINE_SCHEMA_VERSION);
    assert_eq!(b.name, "main");
    assert_eq!(b.machine_fingerprint, report.environment.fingerprint());
    assert!(b.saved_at.ends_with('Z') && b.saved_at.len() == 20, "{}", b.saved_at);
    // float_roundtrip makes the raw samples come back bit-exact.
    assert_eq!(json(&b.report), json(&report));
    assert_eq!(files_in(store.dir()), ["main.json"]);
}

#[test]
fn save_overwrites_and_list_and_delete() {
    let tmp = TempDir::new("list");
    let store = Store::new(&tmp.0);
    assert!(store.list().unwrap().is_empty(), "a missing directory lists nothing");
    let mut report = fixture();
    store.save("v1.0_rc-2", &report).unwrap();
    store.save("main", &report).unwrap();
    report.wall_time_secs = 7.0;
    report.cases.truncate(1);
    store.save("main", &report).unwrap();
    let again = store.load("main").unwrap();
    assert_eq!(again.report.wall_time_secs, 7.0);
    assert_eq!(again.report.cases.len(), 1);

    let list = store.list().unwrap();
    let names: Vec<&str> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["main", "v1.0_rc-2"]);
    assert_eq!((list[0].cases, list[0].failed), (1, 0));
    assert_eq!((list[1].cases, list[1].failed), (3, 1));
    assert_eq!(list[1].cpu_model, "AMD EPYC 7763 64-Core Processor");
    assert_eq!(list[1].fingerprint, report.environment.fingerprint());
    assert_eq!(list[1].path, store.dir().join("v1.0_rc-2.json"));
    assert!(list.iter().all(|i| i.problem.is_none()));

    store.delete("main").unwrap();
    assert_eq!(files_in(store.dir()), ["v1.0_rc-2.json"]);
    let err = err_text(store.delete("main"));
    assert!(err.contains("baseline `main` not found") && err.contains("available: v1.0_rc-2"), "{err}");
}

#[test]
fn bad_names_are_refused_before_touching_the_disk() {
    let tmp = TempDir::new("names");
    let store = Store::new(&tmp.0);
    let report = fixture();
    for bad in ["", ".hidden", "../escape", "a/b", "with space", "tab\t", "ümlaut", "a\\b", "x*"] {
        let err = err_text(store.save(bad, &report));
        assert!(err.contains("baseline name"), "{bad:?}: {err}");
        assert!(store.load(bad).is_err() && store.delete(bad).is_err(), "{bad:?}");
    }
    assert!(err_text(store.save(&"a".repeat(MAX_NAME_LEN + 1), &report)).contains("longer than"));
    assert!(!tmp.0.exists(), "nothing was created");
    for good in ["a", "A-1", "v1.2.3", "x_y", "a..b", &"z".repeat(MAX_NAME_LEN)] {
        validate_name(good).unwrap();
    }
}

#[test]
fn missing_baseline_names_the_available_ones() {
    let tmp = TempDir::new("missing");
    let store = Store::new(&tmp.0);
    let err = err_text(store.load("main"));
    assert_eq!(err, format!("baseline `main` not found: no baselines saved in {} yet", tmp.0.display()));
    let report = fixture();
    store.save("b", &report).unwrap();
    store.save("a", &report).unwrap();
    // Foreign files are not baselines.
    std::fs::write(tmp.0.join("notes.txt"), "x").unwrap();
    std::fs::write(tmp.0.join(".a.json.123.456.tmp"), "{").unwrap();
    let err = err_text(store.load("main"));
    assert_eq!(err, format!("baseline `main` not found in {}; available: a, b", tmp.0.display()));
}

#[test]
fn corrupt_and_foreign_files_give_errors_naming_the_file() {
    let tmp = TempDir::new("corrupt");
    let store = Store::new(&tmp.0);
    let report = fixture();
    let path = store.save("good", &report).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();

    let truncated = tmp.0.join("trunc.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let err = err_text(store.load("trunc"));
    assert!(err.contains(&truncated.display().to_string()) && err.contains("invalid JSON"), "{err}");

    let mut value: Value = serde_json::from_str(&text).unwrap();
    value["schema_version"] = 99.into();
    std::fs::write(tmp.0.join("future.json"), value.to_string()).unwrap();
    let err = err_text(store.load("future"));
    assert!(err.contains("future.json"), "{err}");
    assert!(err.contains("unsupported baseline schema_version 99 (this tfbench reads 1)"), "{err}");

    value["schema_version"] = 1.into();
    value["report"]["schema_version"] = 7.into();
    std::fs::write(tmp.0.join("oldreport.json"), value.to_string()).unwrap();
    let err = err_text(store.load("oldreport"));
    assert!(err.contains("oldreport.json") && err.contains("unsupported schema_version 7"), "{err}");

    // A plain results file is not a baseline.
    std::fs::write(tmp.0.join("results.json"), crate::report::json::render(&report).unwrap()).unwrap();
    let err = err_text(store.load("results"));
    assert!(err.contains("results.json") && err.contains("missing report"), "{err}");

    // The listing keeps going and says what is wrong with each file.
    let list = store.list().unwrap();
    let names: Vec<&str> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["future", "good", "oldreport", "results", "trunc"]);
    let problems: Vec<bool> = list.iter().map(|i| i.problem.is_some()).collect();
    assert_eq!(problems, [true, false, true, true, true]);
    assert!(list[4].problem.as_deref().unwrap().contains("trunc.json"));
    assert_eq!(list[4].cases, 0);
}

#[test]
fn concurrent_saves_leave_one_valid_file() {
    let tmp = TempDir::new("concurrent");
    let store = Store::new(&tmp.0);
    let base = fixture();
    std::thread::scope(|s| {
        for i in 0..8 {
            let (store, mut report) = (&store, base.clone());
            s.spawn(move || {
                report.wall_time_secs = f64::from(i);
                // Different sizes, so interleaved bytes would show.
                report.cases.truncate(1 + i as usize % 3);
                for _ in 0..5 {
                    store.save("shared", &report).unwrap();
                }
            });
        }
    });
    assert_eq!(files_in(store.dir()), ["shared.json"], "no temporary files left");
    let b = store.load("shared").unwrap();
    let i = b.report.wall_time_secs as usize;
    assert!(i < 8 && b.report.cases.len() == 1 + i % 3);
}

#[test]
fn load_results_reads_results_and_baseline_files() {
    let tmp = TempDir::new("results");
    let store = Store::new(&tmp.0);
    let report = fixture();
    let baseline_path = store.save("main", &report).unwrap();
    let results_path = tmp.0.join("run.json");
    std::fs::write(&results_path, crate::report::json::render(&report).unwrap()).unwrap();
    assert_eq!(json(&load_results(&baseline_path).unwrap()), json(&report));
    assert_eq!(json(&load_results(&results_path).unwrap()), json(&report));

    let garbage = tmp.0.join("garbage.json");
    std::fs::write(&garbage, "{\"schema_version\": 1, \"cases\": [").unwrap();
    let err = err_text(load_results(&garbage));
    assert!(err.contains(&garbage.display().to_string()) && err.contains("invalid JSON"), "{err}");
    std::fs::write(&garbage, "{\"schema_version\": 3}").unwrap();
    let err = err_text(load_results(&garbage));
    assert!(err.contains("garbage.json") && err.contains("unsupported schema_version 3"), "{err}");
    let missing = tmp.0.join("nope.json");
    let err = err_text(load_results(&missing));
    assert!(err.starts_with(&format!("cannot read {}", missing.display())), "{err}");
}

#[test]
fn runs_on_different_kinds_of_gpu_cannot_stand_together() {
    let gpu = |name: &str| crate::env::GpuEnvironment {
        device: "cuda:0".into(),
        name: name.into(),
        uuid: format!("{name}-uuid"),
        compute_capability: "9.0".into(),
        memory_bytes: 80 << 30,
        driver_cuda_version: Some("13.0".into()),
        ..Default::default()
    };
    let mut a = fixture();
    let mut b = fixture();
    a.environment.gpus = vec![gpu("NVIDIA H100 80GB HBM3")];
    // A run that records no GPU (CPU cases only, or older results) is fine.
    check_same_build_and_machine("main", &[a.clone(), b.clone()]).unwrap();
    b.environment.gpus = vec![gpu("NVIDIA A100-SXM4-80GB")];
    let e = err_text(check_same_build_and_machine("main", &[a, b]));
    assert!(e.contains("main: its runs come from different GPUs") && e.contains("A100"), "{e}");
}
