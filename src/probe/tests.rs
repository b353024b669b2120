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
        load: None,
        levels: Vec::new(),
        cores: None,
    }
}

/// A level's figures, for tests that only need one to be present.
pub(crate) fn sample_level(name: &str) -> LevelBandwidth {
    LevelBandwidth {
        level: name.into(),
        capacity_bytes: None,
        per_core: false,
        capacity_source: "none".into(),
        working_set_bytes: 1 << 30,
        read_one_thread: 15.0e9,
        copy_one_thread: 12.0e9,
        triad_one_thread: 14.0e9,
        read_all_threads: 31.0e9,
        copy_all_threads: 24.0e9,
        triad_all_threads: 30.0e9,
    }
}

/// Load figures as the app records them: other work took `share` of a core
/// beyond the spare CPUs; `disturbed` is the verdict (synthetic here, the
/// rule itself is `compare::disturbance`'s and tested there).
fn with_load(mut l: MachineLimits, share: f64, disturbed: bool, attempt: u32) -> MachineLimits {
    l.load = Some(ProbeLoad {
        wall_ns: 4e9,
        others_ns: share * 4e9,
        steal_ns: 0.0,
        cpus: 2,
        threads: 2,
        disturbed: disturbed.then_some(share),
        attempt,
        injected: None,
    });
    l
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
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 2).expect("absent is not an error"), None);
    let limits = sample_limits("00ff00ff00ff00ff");
    let path = save_in(&dir, &limits).expect("save");
    assert_eq!(path, dir.join("probe-00ff00ff00ff00ff-t2.json"));
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 2).expect("load"), Some(limits.clone()));
    // A probe on one thread is cached beside it and never read as the
    // two-thread (all-core) probe: that made a 2-thread GEMM read 166% of peak.
    let one = MachineLimits { threads: 1, ..limits.clone() };
    save_in(&dir, &one).expect("save the one-thread probe");
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 2).expect("load"), Some(limits.clone()));
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 1).expect("load"), Some(one));
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 4).expect("absent"), None);
    std::fs::remove_file(dir.join("probe-00ff00ff00ff00ff-t1.json")).expect("remove");
    // Overwriting goes through the same rename and leaves no temp files.
    let mut newer = limits;
    newer.measured_at = "2024-01-01T00:00:00Z".into();
    save_in(&dir, &newer).expect("save again");
    assert_eq!(load_in(&dir, "00ff00ff00ff00ff", 2).expect("load"), Some(newer));
    let names: Vec<_> = std::fs::read_dir(&dir).expect("list").flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
}

#[test]
fn corrupt_cache_is_an_error_naming_the_file() {
    let dir = temp_dir("corrupt");
    let path = dir.join("probe-abc123-t2.json");
    std::fs::write(&path, "{ \"fingerprint\": \"abc123\", trunc").expect("write");
    let err = load_in(&dir, "abc123", 2).expect_err("corrupt file must not load");
    assert!(format!("{err:#}").contains(&path.display().to_string()), "{err:#}");
    // A file under the wrong name is just as unusable.
    save_in(&dir, &sample_limits("def456")).expect("save");
    std::fs::rename(dir.join("probe-def456-t2.json"), &path).expect("rename");
    let err = load_in(&dir, "abc123", 2).expect_err("mismatched fingerprint");
    assert!(format!("{err:#}").contains("def456"), "{err:#}");
    // So is a file whose thread count is not its name's.
    save_in(&dir, &MachineLimits { threads: 1, ..sample_limits("abc123") }).expect("save");
    std::fs::rename(dir.join("probe-abc123-t1.json"), &path).expect("rename");
    let err = load_in(&dir, "abc123", 2).expect_err("mismatched threads");
    assert!(format!("{err:#}").contains("1-thread probe"), "{err:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fingerprints_cannot_escape_the_cache() {
    let dir = temp_dir("escape");
    assert!(save_in(&dir, &sample_limits("../evil")).is_err());
    assert!(load_in(&dir, "a/b", 2).is_err());
    assert!(load_in(&dir, "", 2).is_err());
    assert!(load_in(&dir, "abc", 0).is_err());
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
    let caches = levels::CacheSizes::from_parts(Some(32 << 10), Some(256 << 10), Some(1 << 20));
    let limits = measure_with(2, &ProbeConfig::quick(), "quick".into(), &caches).expect("probe");
    assert_eq!(limits.threads, 2);
    let names: Vec<_> = limits.levels.iter().map(|l| l.level.as_str()).collect();
    assert_eq!(names, ["L1", "L2", "L3", "DRAM"]);
    assert_eq!(limits.levels[3].triad_all_threads, limits.triad_bandwidth_all_threads);
    assert!(!needs_reprobe(&limits, false), "a probe with levels is not re-probed for them");
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
    assert!(measure_with(0, &ProbeConfig::quick(), "quick".into(), &caches).is_err());
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

#[test]
fn a_clean_probe_is_cached_on_the_first_clean_try() {
    let mut tries = Vec::new();
    let mut heard = Vec::new();
    let plan = [(0.6, true), (0.02, false), (0.7, true)];
    let settled = settle(
        MAX_TRIES,
        Duration::ZERO,
        |k| {
            tries.push(k);
            let (share, disturbed) = plan[k as usize - 1];
            Ok(with_load(sample_limits("aa"), share, disturbed, k))
        },
        |k, share| heard.push((k, share)),
    )
    .expect("settled");
    assert_eq!(tries, vec![1, 2], "stops at the first clean try");
    assert_eq!(heard, vec![(1, 0.6)]);
    assert_eq!(settled.tries, 2);
    assert_eq!(settled.limits.load_state(), LoadState::Clean);
    assert!(settled.limits.cacheable());
    assert!(settled.limits.disturbed_note().is_none());
    assert!(settled.limits.load_summary().starts_with("clean"), "{}", settled.limits.load_summary());
    // A first clean try is taken at once.
    let once = settle(3, Duration::ZERO, |k| Ok(with_load(sample_limits("aa"), 0.0, false, k)), |_, _| {})
        .expect("settled");
    assert_eq!(once.tries, 1);
}

#[test]
fn a_probe_disturbed_on_every_try_is_used_but_not_cached() {
    let shares = [0.9, 0.4, 0.8];
    let mut heard = Vec::new();
    let settled = settle(
        3,
        Duration::ZERO,
        |k| Ok(with_load(sample_limits("aa"), shares[k as usize - 1], true, k)),
        |k, share| heard.push((k, share)),
    )
    .expect("settled");
    assert_eq!(settled.tries, 3);
    assert_eq!(heard.len(), 2, "the last try is not followed by another: {heard:?}");
    // The least disturbed try is kept.
    assert_eq!(settled.limits.load_state(), LoadState::Disturbed(0.4));
    assert_eq!(settled.limits.load.as_ref().map(|l| l.attempt), Some(2));
    assert!(!settled.limits.cacheable());
    let note = settled.limits.disturbed_note().expect("a note");
    assert!(note.contains("40% of a core") && note.contains("not cached"), "{note}");
    let summary = settled.limits.load_summary();
    assert!(summary.starts_with("DISTURBED: other work took 40% of a core"), "{summary}");
    // A failing try ends it with the error; no try count is zero.
    assert!(settle(3, Duration::ZERO, |_| bail!("probe failed"), |_, _| {}).is_err());
    let mut n = 0;
    let zero = settle(
        0,
        Duration::ZERO,
        |k| {
            n += 1;
            Ok(with_load(sample_limits("aa"), 0.5, true, k))
        },
        |_, _| {},
    );
    assert_eq!((zero.expect("one try").tries, n), (1, 1));
}

#[test]
fn a_cache_file_written_before_load_was_recorded_loads_as_unknown() {
    let dir = temp_dir("old-format");
    // The layout of a probe cached by tfbench before this field existed.
    let old = r#"{
  "fingerprint": "0123abcd",
  "measured_at": "2025-06-01T10:00:00Z",
  "threads": 2,
  "peak_flops_one_core": 60000000000.0,
  "peak_flops_all_cores": 61000000000.0,
  "copy_bandwidth_one_thread": 6000000000.0,
  "copy_bandwidth_all_threads": 6500000000.0,
  "triad_bandwidth_one_thread": 6200000000.0,
  "triad_bandwidth_all_threads": 6700000000.0
}"#;
    std::fs::write(dir.join("probe-0123abcd-t2.json"), old).expect("write");
    let l = load_in(&dir, "0123abcd", 2).expect("loads").expect("present");
    assert!(l.levels.is_empty(), "no per-level figures in the old layout");
    assert_eq!(l.load, None);
    assert_eq!(l.load_state(), LoadState::Unknown);
    assert!(l.cacheable(), "unknown is not disturbed");
    assert!(l.disturbed_note().is_none());
    assert!(l.load_summary().starts_with("unknown"), "{}", l.load_summary());
    // Re-probed: it has no levels (and, where readable, no load).
    assert!(needs_reprobe(&l, true));
    assert!(needs_reprobe(&l, false), "no per-level figures: re-probed even where the load is unreadable");
    let with_levels = MachineLimits { levels: vec![sample_level("DRAM")], ..l.clone() };
    assert!(needs_reprobe(&with_levels, true));
    assert!(!needs_reprobe(&with_levels, false));
    // A probe with its load and levels recorded is not re-probed, and round-trips.
    let clean = MachineLimits {
        levels: vec![sample_level("DRAM")],
        ..with_load(sample_limits("0123abcd"), 0.01, false, 1)
    };
    assert!(!needs_reprobe(&clean, true));
    save_in(&dir, &clean).expect("save");
    assert_eq!(load_in(&dir, "0123abcd", 2).expect("load"), Some(clean));
    let _ = std::fs::remove_dir_all(&dir);
}
