//! A bench target's benchmarks through every mode: registration mistakes,
//! the generated suite, and failures that stay with their case.

use super::*;
use crate::bench::{Benches, Grid, Routine, Verification};
use crate::cli::BenchArgs;
use clap::Parser;
use std::sync::atomic::{AtomicU32, Ordering};

fn args(extra: &[&str]) -> BenchArgs {
    let mut argv = vec!["t-0123456789abcdef", "--quick", "--no-canary"];
    argv.extend_from_slice(extra);
    BenchArgs::try_parse_from(argv).expect("arguments parse")
}

/// Four benchmarks: one fine over two inputs, one whose routine panics
/// once timed (not in its check), one with a wrong result, one whose setup
/// panics.
fn registry() -> Vec<&'static dyn Suite> {
    let mut c = Benches::new("t");
    c.bench_with_input("sum", "n", [10u64, 100], |b, &n| {
        b.iter(move || (0..n).sum::<u64>())
            .verify(move |s| Verification::equal("n(n-1)/2", s, &(n * (n - 1) / 2)))
    });
    c.bench_function("panics", |b| {
        let calls = AtomicU32::new(0);
        b.iter(move || {
            // The check's call passes; the first timed one panics.
            assert!(calls.fetch_add(1, Ordering::Relaxed) == 0, "boom in the routine");
            1
        })
        .verify(|s| Verification::equal("one", s, &1))
    });
    c.bench_function("wrong", |b| b.iter(|| 5).verify(|s| Verification::equal("four", s, &4)));
    c.bench_function("setup_panics", |_| -> Routine { panic!("boom in the setup") });
    c.into_registry().expect("valid registrations")
}

#[test]
fn the_registrations_become_a_suite_with_these_case_ids() {
    let reg = registry();
    let plan = crate::app::plan_in(&reg, &args(&["--bench"]).run).unwrap();
    let ids: Vec<_> = plan.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["t/sum/n=10", "t/sum/n=100", "t/panics", "t/wrong", "t/setup_panics"]);
    let plan = crate::app::plan_in(&reg, &args(&["--bench", "sum/n=1"]).run).unwrap();
    assert_eq!(plan.cases.len(), 2, "FILTER is a regex over the ids");
}

#[test]
fn a_config_file_may_only_choose_registered_inputs() {
    let dir = std::env::temp_dir().join(format!("tfbench-bench-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(&file, "[suites.t.benchmarks.sum]\nn = [100]\n").unwrap();
    let f = file.to_str().unwrap();
    let plan = crate::app::plan_in(&registry(), &args(&["--config", f]).run).unwrap();
    assert_eq!(plan.cases.iter().filter(|c| c.benchmark == "sum").count(), 1);
    std::fs::write(&file, "[suites.t.benchmarks.sum]\nn = [7]\n").unwrap();
    let err = crate::app::plan_in(&registry(), &args(&["--config", f]).run).unwrap_err().to_string();
    assert!(err.contains("c.toml:2") && err.contains("valid: 10, 100"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_failure_stays_with_its_case_as_a_test() {
    let reg = registry();
    let plan = crate::app::plan_in(&reg, &args(&[]).run).unwrap();
    let results: Vec<_> = quiet_panics(|| plan.cases.iter().map(|c| (c.id.clone(), once(&reg, c))).collect());
    let get = |id: &str| results.iter().find(|(i, _)| i == id).map(|(_, r)| r.clone()).unwrap();
    assert_eq!(get("t/sum/n=10"), Ok(None));
    assert_eq!(get("t/sum/n=100"), Ok(None));
    let e = get("t/panics").unwrap_err();
    assert!(e.starts_with("run: panicked") && e.contains("boom in the routine"), "{e}");
    let e = get("t/wrong").unwrap_err();
    assert!(e.starts_with("verify: wrong result against four") && e.contains("got 5, expected 4"), "{e}");
    let e = get("t/setup_panics").unwrap_err();
    assert!(e.starts_with("prepare: panicked") && e.contains("boom in the setup"), "{e}");
}

#[test]
fn each_failure_stays_with_its_case_when_measured() {
    let reg = registry();
    let plan = crate::app::plan_in(&reg, &args(&["--bench", "--sample-size", "3"]).run).unwrap();
    let clock = crate::harness::timer::calibrate();
    let mut finish = |o: &crate::harness::runner::CaseOutcome, s: &crate::config::Settings| {
        crate::analysis::analyze(o, s, None)
    };
    let results =
        crate::harness::runner::execute(&plan, &clock, &mut crate::harness::runner::Silent, &mut finish);
    let status = |id: &str| results.iter().find(|r| r.id == id).map(|r| r.status.clone()).unwrap();
    use crate::results::CaseStatus;
    assert_eq!(status("t/sum/n=100"), CaseStatus::Ok);
    assert!(results.iter().find(|r| r.id == "t/sum/n=10").unwrap().estimates.is_some());
    for (id, phase, text) in [
        ("t/panics", "measure", "boom in the routine"),
        ("t/wrong", "verify", "got 5, expected 4"),
        ("t/setup_panics", "prepare", "boom in the setup"),
    ] {
        match status(id) {
            CaseStatus::Failed { phase: p, reason } => {
                assert!(p == phase && reason.contains(text), "{id}: {p}: {reason}")
            }
            other => panic!("{id}: {other:?}"),
        }
    }
}

#[test]
fn registration_mistakes_are_named_together() {
    let mut c = Benches::new("t");
    let r = |b: &mut crate::bench::Bencher<'_>| b.iter(|| 1).verify(|s| Verification::equal("one", s, &1));
    c.bench_function("a", r).bench_function("a", r).bench_function("b/c", r);
    c.bench_grid("g", Grid::new(), move |b| Ok(r(b)));
    c.bench_with_input("h", "n", Vec::<u32>::new(), move |b, _| r(b));
    let err = c.into_registry().err().unwrap().to_string();
    for part in [
        "`a` is registered twice",
        "`b/c` is not a name",
        "`g`: the grid has no parameter",
        "`n` has no values",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
    let err = Benches::new("t").into_registry().err().unwrap().to_string();
    assert!(err.contains("no benchmark is registered"), "{err}");
}

#[test]
fn criterion_spellings_parse() {
    let a = args(&[
        "--bench",
        "--output-format",
        "bencher",
        "--save-baseline",
        "main",
        "--measurement-time",
        "2",
    ]);
    assert_eq!(a.output_format, Some(crate::report::Format::Bencher));
    assert_eq!(a.run.save_baseline.as_deref(), Some("main"));
    assert_eq!(args(&["--output-format", "criterion"]).output_format, Some(crate::report::Format::Table));
    let err = BenchArgs::try_parse_from(["t", "--output-format", "html"]).unwrap_err().to_string();
    assert!(err.contains("valid: criterion, table, json"), "{err}");
    assert!(BenchArgs::try_parse_from(["t", "--output-format", "json", "--format", "csv"]).is_err());
}
