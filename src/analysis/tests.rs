//! Tests of the parent module.

use super::*;
use crate::plan::Case;
use crate::results::Sample;
use crate::workload::Verification;

fn limits() -> MachineLimits {
    MachineLimits {
        fingerprint: "f".into(),
        measured_at: "t".into(),
        threads: 2,
        peak_flops_one_core: 100e9,
        peak_flops_all_cores: 200e9,
        copy_bandwidth_one_thread: 10e9,
        copy_bandwidth_all_threads: 20e9,
        triad_bandwidth_one_thread: 10e9,
        triad_bandwidth_all_threads: 20e9,
        load: None,
        levels: Vec::new(),
        cores: None,
    }
}

fn outcome(times: &[f64], decl: Vec<Throughput>) -> CaseOutcome {
    let samples = times.iter().map(|&t| Sample { iterations: 10, nanos: t * 10.0, round: 0 }).collect();
    CaseOutcome {
        case: Case::new("s", "b", Default::default()),
        failure: None,
        verification: Some(Verification::pass("r")),
        throughput: decl,
        skipped: None,
        metrics: Vec::new(),
        roof: None,
        measurements: vec![Measurement {
            samples,
            warm_up_ns: 1.0,
            iterations_per_sample: 10,
            requested: times.len(),
            stopped_by: StopReason::SampleSize,
            alloc: None,
            prepare_ns: 0.0,
            verify_ns: 0.0,
            placements: 1,
            screen: Default::default(),
            inside: Default::default(),
        }],
    }
}

#[test]
fn rates_invert_the_time_interval_and_scale_to_peak() {
    let times: Vec<f64> = (0..50).map(|i| 1000.0 + (i % 5) as f64).collect();
    let r =
        analyze(&outcome(&times, vec![Throughput::flops(100_000.0)]), &Settings::default(), Some(&limits()));
    let est = r.estimates.as_ref().unwrap();
    assert_eq!(est.median.point, 1002.0);
    let t = &r.throughput[0];
    assert!((t.rate.point - 100_000.0 * 1e9 / 1002.0).abs() < 1.0);
    assert!(t.rate.lower <= t.rate.point && t.rate.point <= t.rate.upper);
    let pct = t.pct_of_peak.unwrap();
    assert!((pct - t.rate.point / 200e9 * 100.0).abs() < 1e-9);
    assert_eq!(r.bound, Some(Bound::Compute));
}

#[test]
fn a_gpu_case_is_measured_against_its_own_roof_not_the_cpus() {
    let times: Vec<f64> = (0..50).map(|i| 1000.0 + (i % 5) as f64).collect();
    let mut o = outcome(&times, vec![Throughput::flops(100_000.0)]);
    o.case = o.case.clone().on(crate::backend::Device::Cuda(0));
    let r = analyze(&o, &Settings::default(), Some(&limits()));
    assert!(r.throughput[0].rate.point > 0.0);
    assert_eq!((r.throughput[0].pct_of_peak, r.bound), (None, None));
    // With its own GPU's roof it gets both, against that roof.
    o.roof = Some(Roof { flops_per_sec: 200e9, bytes_per_sec: 1e12 });
    let r = analyze(&o, &Settings::default(), Some(&limits()));
    let t = &r.throughput[0];
    assert!((t.pct_of_peak.unwrap() - t.rate.point / 200e9 * 100.0).abs() < 1e-9);
    assert_eq!(r.bound, Some(Bound::Compute));
    // 100 kFLOP at 200 GFLOP/s is 0.5 us: 1 us is 50%, compute-bound;
    // a roof 100x higher makes the same time latency-bound.
    o.roof = Some(Roof { flops_per_sec: 20e12, bytes_per_sec: 1e12 });
    assert_eq!(analyze(&o, &Settings::default(), None).bound, Some(Bound::Latency));
}

#[test]
fn outliers_are_counted_and_removed_only_on_request() {
    // Quartiles 95 and 105 (IQR 10): 10 000 is beyond the 3x fence at 135.
    let mut times: Vec<f64> = (0..40).map(|i| 90.0 + (i % 21) as f64).collect();
    times.push(10_000.0);
    let keep = analyze(&outcome(&times, vec![]), &Settings::default(), None);
    let o = keep.outliers.as_ref().unwrap();
    assert_eq!(o.high_severe, 1);
    assert_eq!(o.removed, 0);
    assert!(keep.estimates.as_ref().unwrap().max == 10_000.0);
    let s = Settings { outliers: OutlierPolicy::Remove, ..Default::default() };
    let rem = analyze(&outcome(&times, vec![]), &s, None);
    assert!(rem.outliers.as_ref().unwrap().removed >= 1);
    assert!(rem.estimates.as_ref().unwrap().max < 10_000.0);
    assert!(rem.notes.iter().any(|n| n.contains("removed")));
}

#[test]
fn noisy_cases_get_a_note_and_analysis_is_reproducible() {
    let times: Vec<f64> = (0..40).map(|i| 100.0 + 5.0 * (i % 8) as f64).collect();
    let a = analyze(&outcome(&times, vec![]), &Settings::default(), None);
    assert!(a.notes.iter().any(|n| n.starts_with("noisy")), "{:?}", a.notes);
    let b = analyze(&outcome(&times, vec![]), &Settings::default(), None);
    assert_eq!(a.estimates, b.estimates);
}

#[test]
fn roofline_classes() {
    let l = limits();
    // 1 FLOP per byte is below the balance of 10: memory-bound at 50% of bandwidth.
    let mem = [Throughput::flops(1e6), Throughput::bytes(1e6)];
    assert_eq!(classify(&mem, 1e6 / 20e9 * 2.0 * 1e9, &l, false), Some(Bound::Memory));
    // Same work taking 100x the roofline time: latency-bound.
    assert_eq!(classify(&mem, 1e6 / 20e9 * 100.0 * 1e9, &l, false), Some(Bound::Latency));
    let comp = [Throughput::flops(1e9), Throughput::bytes(1e6)];
    assert_eq!(classify(&comp, 1e9 / 200e9 * 1.2 * 1e9, &l, false), Some(Bound::Compute));
    assert_eq!(classify(&[Throughput::items(3.0)], 10.0, &l, false), None);
}

#[test]
fn failed_cases_keep_their_reason_and_no_estimates() {
    let mut o = outcome(&[1.0, 2.0], vec![]);
    o.failure = Some(("verify".into(), "bad".into()));
    let r = analyze(&o, &Settings::default(), None);
    assert!(r.status.is_failed() && r.estimates.is_none());
}

/// A case rating `rate` per second of what `decl` declares.
fn case_at(decl: Throughput, id: &str, rate: f64) -> CaseResult {
    let mut r = analyze(&outcome(&[1.0, 1.0, 1.0], vec![decl]), &Settings::default(), None);
    r.id = id.into();
    r.throughput[0].rate.point = rate;
    r
}

fn flops_at(id: &str, rate: f64) -> CaseResult {
    case_at(Throughput::flops(1.0), id, rate)
}

fn gemm_target() -> TargetSpec {
    TargetSpec {
        name: "gemm",
        case_pattern: "^t/mm/",
        matching: TargetMatch::Fastest,
        kind: ThroughputKind::Flops,
        limit: Limit::PeakFlopsAllCores,
        required: 0.8,
    }
}

#[test]
fn targets_pick_the_best_matching_case() {
    let cases = vec![flops_at("t/mm/a", 150e9), flops_at("t/mm/b", 170e9), flops_at("t/add/x", 500e9)];
    let checks = evaluate_targets(&[gemm_target()], &cases, Some(&limits()));
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].case_id, "t/mm/b");
    assert!((checks[0].ratio - 0.85).abs() < 1e-12 && checks[0].met);
    assert!(checks[0].caveat.is_none());
}

#[test]
fn a_case_above_the_probed_fma_peak_gives_no_verdict() {
    // 210 of a probed 200 GFLOP/s: the probe was disturbed, not met.
    let check = &evaluate_targets(&[gemm_target()], &[flops_at("t/mm/a", 210e9)], Some(&limits()))[0];
    assert!(!check.met, "an impossible ratio is no pass");
    let caveat = check.caveat.as_deref().expect("a caveat");
    assert!(caveat.contains("t/mm/a") && caveat.contains("105%") && caveat.contains("--probe"), "{caveat}");
    // At the peak exactly: believable, met.
    let check = &evaluate_targets(&[gemm_target()], &[flops_at("t/mm/a", 200e9)], Some(&limits()))[0];
    assert!(check.met && check.caveat.is_none());
    // Bandwidth above the triad probe is possible: no caveat.
    let cases = vec![rated("q/a", 25e9)];
    let check = &evaluate_targets(&[every("^q/")], &cases, Some(&limits()))[0];
    assert!(check.met && check.caveat.is_none());
}

#[test]
fn a_disturbed_probe_notes_its_rates_and_withholds_a_met_target() {
    let mut disturbed = limits();
    disturbed.load = Some(crate::probe::ProbeLoad {
        wall_ns: 4e9,
        others_ns: 2.4e9,
        steal_ns: 0.0,
        cpus: 2,
        threads: 2,
        disturbed: Some(0.6),
        attempt: 3,
        injected: None,
    });
    let o = outcome(&[100.0, 101.0, 99.0, 100.0, 102.0], vec![Throughput::flops(1000.0)]);
    let s = Settings::default();
    let r = analyze(&o, &s, Some(&disturbed));
    assert!(r.throughput[0].pct_of_peak.is_some());
    assert!(r.notes.iter().any(|n| n.contains("probe disturbed") && n.contains("60%")), "{:?}", r.notes);
    let clean = analyze(&o, &s, Some(&limits()));
    assert!(clean.notes.iter().all(|n| !n.contains("probe")), "{:?}", clean.notes);
    // No limits, no % of peak, no note.
    assert!(analyze(&o, &s, None).notes.iter().all(|n| !n.contains("probe")));

    // 170 of 200 GFLOP/s would meet 80%, but the limit reads low.
    let check = &evaluate_targets(&[gemm_target()], &[flops_at("t/mm/a", 170e9)], Some(&disturbed))[0];
    assert!(!check.met);
    assert!(check.caveat.as_deref().is_some_and(|c| c.contains("60% of a core")), "{check:?}");
    // 100 of 200 misses it, and would miss a higher true limit too.
    let check = &evaluate_targets(&[gemm_target()], &[flops_at("t/mm/a", 100e9)], Some(&disturbed))[0];
    assert!(!check.met && check.caveat.is_none(), "{check:?}");
}

fn rated(id: &str, rate: f64) -> CaseResult {
    case_at(Throughput::bytes(1.0), id, rate)
}

fn every(pattern: &'static str) -> TargetSpec {
    TargetSpec {
        name: "every q",
        case_pattern: pattern,
        matching: TargetMatch::Every,
        kind: ThroughputKind::Bytes,
        limit: Limit::TriadAllThreads,
        required: 0.5,
    }
}

#[test]
fn every_mode_reports_the_slowest_case_and_needs_all_to_pass() {
    let cases = vec![rated("q/a", 15e9), rated("q/b", 9e9), rated("q/c", 12e9), rated("other", 1e9)];
    let checks = evaluate_targets(&[every("^q/")], &cases, Some(&limits()));
    assert_eq!(checks.len(), 1);
    let c = &checks[0];
    assert_eq!(c.case_id, "q/b", "the slowest case is named");
    assert!((c.ratio - 0.45).abs() < 1e-12 && !c.met, "9 of 20 GB/s is below 50%");
    assert_eq!(c.name, "every q; slowest of 3 cases");
    // All at or above the line: met, still showing the slowest.
    let cases = vec![rated("q/a", 15e9), rated("q/b", 10e9)];
    let c = &evaluate_targets(&[every("^q/")], &cases, Some(&limits()))[0];
    assert_eq!((c.case_id.as_str(), c.met), ("q/b", true));
    // Nothing matching: no check at all.
    assert!(evaluate_targets(&[every("^none/")], &cases, Some(&limits())).is_empty());
}

#[test]
fn every_mode_counts_a_failed_case_as_zero() {
    let mut bad = rated("q/bad", 50e9);
    bad.status = analyze(
        &{
            let mut o = outcome(&[1.0], vec![]);
            o.failure = Some(("verify".into(), "mismatch".into()));
            o
        },
        &Settings::default(),
        None,
    )
    .status;
    let cases = vec![rated("q/a", 15e9), bad];
    let c = &evaluate_targets(&[every("^q/")], &cases, Some(&limits()))[0];
    assert_eq!((c.case_id.as_str(), c.measured, c.met), ("q/bad", 0.0, false));
    // The fastest mode skips it.
    let fastest = TargetSpec { matching: TargetMatch::Fastest, ..every("^q/") };
    assert_eq!(evaluate_targets(&[fastest], &cases, Some(&limits()))[0].case_id, "q/a");
}

#[test]
fn a_cpu_case_gets_its_cache_level_roof_and_a_suspect_rate_is_flagged() {
    let mut l = limits();
    let level = |name: &str, cap: Option<u64>, bw: f64| crate::probe::LevelBandwidth {
        level: name.into(),
        capacity_bytes: cap,
        per_core: name != "L3",
        capacity_source: "sysfs".into(),
        working_set_bytes: 0,
        read_one_thread: bw / 2.0,
        copy_one_thread: bw / 2.0,
        triad_one_thread: bw / 2.0,
        read_all_threads: bw,
        copy_all_threads: bw,
        triad_all_threads: bw,
    };
    l.levels = vec![
        level("L1", Some(48 << 10), 400e9),
        level("L2", Some(1 << 20), 160e9),
        level("L3", Some(32 << 20), 60e9),
        level("DRAM", None, 20e9),
    ];
    // 1 MB moved per iteration (fits the two cores' L2) in 10 us: 100 GB/s,
    // 59% of L2's 160 GB/s (with the share the L1s hold at 400 GB/s): it
    // used to read 500% of DRAM triad.
    let times = vec![10_000.0; 20];
    let r = analyze(&outcome(&times, vec![Throughput::bytes(1e6)]), &Settings::default(), Some(&l));
    let roof = r.roof.as_ref().expect("a CPU case with a probe has a roof");
    assert_eq!((roof.name.as_str(), roof.threads), ("L2", 2));
    let l1 = 2.0 * 48.0 * 1024.0;
    let bw = 1e6 / (l1 / 400e9 + (1e6 - l1) / 160e9);
    assert!((r.throughput[0].pct_of_peak.unwrap() - 100e9 / bw * 100.0).abs() < 1e-6);
    assert!(!roof.suspect && r.notes.iter().all(|n| !n.contains("measurement problem")));
    // The same bytes in 3 us: 333 GB/s, 196% of L2: flagged, not a success.
    let r = analyze(&outcome(&[3000.0; 20], vec![Throughput::bytes(1e6)]), &Settings::default(), Some(&l));
    assert!(r.roof.as_ref().unwrap().suspect);
    assert!(
        r.notes.iter().any(|n| n.starts_with("measurement problem: 196% of its L2 roof")),
        "{:?}",
        r.notes
    );
    // No probe: no roof.
    assert!(
        analyze(&outcome(&times, vec![Throughput::bytes(1e6)]), &Settings::default(), None).roof.is_none()
    );
}
