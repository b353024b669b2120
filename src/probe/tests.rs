use super::*;

/// A fresh directory per test, so parallel tests and reruns never collide.
fn temp_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("tfbench-probe-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn sample_limits(fingerprint: &str) -> MachineLimits {
    MachineLimits {
        fingerprint: fingerprint.to_string(),
        measured_at: "2023-11-14T22:13:20Z".to_string(),
        threads: 2,
        peak_flops_one_core: 175.5e9,
        peak_flops_all_cores: 350.25e9,
        copy_bandwidth_one_thread: 12.0e9,
        copy_bandwidth_all_threads: 24.0e9,
        triad_bandwidth_one_thread: 14.0e9,
        triad_bandwidth_all_threads: 30.0e9,
    }
}

#[test]
fn rfc3339_known_values() {
    assert_eq!(rfc3339_from_unix(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_from_unix(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339_from_unix(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(rfc3339_from_unix(-1), "1969-12-31T23:59:59Z");
    assert_eq!(rfc3339_from_unix(4_107_542_399), "2100-02-28T23:59:59Z");
    assert_eq!(rfc3339_from_unix(4_107_542_400), "2100-03-01T00:00:00Z");
}

#[test]
fn now_is_rfc3339_shaped() {
    let now = now_rfc3339();
    assert_eq!(now.len(), 20, "{now}");
    assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    assert!(now.as_str() > "2024-01-01T00:00:00Z", "{now}");
}

#[test]
fn cache_dir_precedence() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| OsString::from(v))
    };
    let all: &'static [(&str, &str)] =
        &[("TFBENCH_CACHE_DIR", "/x/tf"), ("XDG_CACHE_HOME", "/x/xdg"), ("HOME", "/x/home")];
    assert_eq!(cache_dir_from(vars(all)), PathBuf::from("/x/tf"));
    assert_eq!(cache_dir_from(vars(&all[1..])), PathBuf::from("/x/xdg/tfbench"));
    assert_eq!(
        cache_dir_from(vars(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
        PathBuf::from("/h/.cache/tfbench")
    );
    assert_eq!(
        cache_dir_from(vars(&[("TFBENCH_CACHE_DIR", ""), ("HOME", "/h")])),
        PathBuf::from("/h/.cache/tfbench")
    );
    assert_eq!(cache_dir_from(vars(&[])), PathBuf::from(".tfbench-cache"));
}

#[test]
fn save_load_round_trip() {
    let dir = temp_dir("roundtrip").join("nested");
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff").expect("absent is not an error"), None);
    let limits = sample_limits("00ff00ff00ff00ff");
    let path = save_in(&dir, &limits).expect("save");
    assert_eq!(path, dir.join("probe-00ff00ff00ff00ff.json"));
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff").expect("load"), Some(limits.clone()));
    // Overwriting goes through the same rename and leaves no temp files.
    let mut newer = limits;
    newer.measured_at = "2024-01-01T00:00:00Z".into();
    save_in(&dir, &newer).expect("save again");
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff").expect("load"), Some(newer));
    let names: Vec<_> = std::fs::read_dir(&dir).expect("list").flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
}

#[test]
fn corrupt_cache_is_an_error_naming_the_file() {
    let dir = temp_dir("corrupt");
    let path = dir.join("probe-abc123.json");
    std::fs::write(&path, "{ \"fingerprint\": \"abc123\", trunc").expect("write");
    let err = load_in(&dir, "abc123").expect_err("corrupt file must not load");
    assert!(format!("{err:#}").contains(&path.display().to_string()), "{err:#}");
    // A file under the wrong name is just as unusable.
    save_in(&dir, &sample_limits("def456")).expect("save");
    std::fs::rename(dir.join("probe-def456.json"), &path).expect("rename");
    let err = load_in(&dir, "abc123").expect_err("mismatched fingerprint");
    assert!(format!("{err:#}").contains("def456"), "{err:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fingerprints_cannot_escape_the_cache() {
    let dir = temp_dir("escape");
    assert!(save_in(&dir, &sample_limits("../evil")).is_err());
    assert!(load_in(&dir, "a/b").is_err());
    assert!(load_in(&dir, "").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gate_runs_every_job_and_times_them() {
    let run = run_gated((0..3).map(|k| move || k * 10).collect()).expect("threads");
    assert_eq!(run.results, vec![0, 10, 20]);
    assert!(run.wall > Duration::ZERO);
    let sleepy = run_gated(vec![|| std::thread::sleep(Duration::from_millis(20))]).expect("thread");
    assert!(sleepy.wall >= Duration::from_millis(20));
    let jobs: Vec<Box<dyn FnOnce() + Send>> =
        vec![Box::new(|| panic!("job fails")), Box::new(|| panic!("so does this"))];
    assert!(run_gated(jobs).is_err());
}

#[test]
fn quick_probe_gives_positive_finite_numbers() {
    let limits = measure_with(2, &ProbeConfig::quick(), "quick".into()).expect("probe");
    assert_eq!(limits.threads, 2);
    for v in [
        limits.peak_flops_one_core,
        limits.peak_flops_all_cores,
        limits.copy_bandwidth_one_thread,
        limits.copy_bandwidth_all_threads,
        limits.triad_bandwidth_one_thread,
        limits.triad_bandwidth_all_threads,
    ] {
        assert!(v.is_finite() && v > 0.0, "{limits:?}");
    }
    assert!(measure_with(0, &ProbeConfig::quick(), "quick".into()).is_err());
}

#[test]
#[ignore = "full-size probe: several seconds and over 1 GiB of memory"]
fn full_probe() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let start = Instant::now();
    let limits = measure(threads).expect("probe");
    let took = start.elapsed();
    assert!(limits.peak_flops_all_cores >= limits.peak_flops_one_core * 0.9, "{limits:?}");
    assert!(took < Duration::from_secs(20), "probe took {took:?}");
}

#[test]
fn a_busy_probe_is_suspected_and_a_consistent_one_is_not() {
    let good = sample_limits("aa");
    assert!(good.suspicions().is_empty());
    assert!(busy_warning(&good).is_none());
    // Measured on this 2-core VM while compilers ran: 2 threads gave less FMA than one core.
    let busy = MachineLimits { peak_flops_all_cores: 119.8e9, peak_flops_one_core: 129.0e9, ..good.clone() };
    let s = busy.suspicions();
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(s[0].contains("0.93x"), "{}", s[0]);
    let w = busy_warning(&busy).expect("warned");
    assert!(w.contains("re-run `tfbench sysinfo --probe`"), "{w}");
    let triad = MachineLimits { triad_bandwidth_all_threads: 10.0e9, ..good.clone() };
    assert_eq!(triad.suspicions().len(), 1);
    // One thread has nothing to compare.
    assert!(MachineLimits { threads: 1, ..busy }.suspicions().is_empty());
}
