//! Raw samples -> estimates, intervals, outliers, rates, roofline class and
//! notes. Pure: no clocks, no I/O.

use crate::config::{OutlierPolicy, Settings};
use crate::harness::sampler::Measurement;
use crate::plan::ParamValue;
use crate::probe::MachineLimits;
use crate::results::{
    AllocStats, Bound, CaseResult, CaseStatus, Estimate, Estimates, OutlierCounts, SamplingInfo, StopReason,
    TargetCheck, ThroughputEstimate,
};
use crate::stats::{self, OutlierClass};
use crate::suites::{Limit, TargetMatch, TargetSpec};
use crate::workload::{Roof, Throughput, ThroughputKind};

/// IQR/median above this marks a case as noisy.
pub const NOISY_IQR_RATIO: f64 = 0.10;
/// A case achieving under this fraction of its roofline bound is latency-bound.
pub const LATENCY_BOUND_FRACTION: f64 = 0.10;

pub use crate::harness::runner::CaseOutcome;

/// Turns one case's raw outcome into its result.
pub fn analyze(o: &CaseOutcome, s: &Settings, limits: Option<&MachineLimits>) -> CaseResult {
    // The probed limits are the CPU's: a case on another device (a GPU) is
    // measured against that device's own roof, which its workload reports
    // from the device's probe (none: no "% of peak", no roofline class).
    let one_core = matches!(o.case.params.get("threads"), Some(ParamValue::Int(1)));
    let roof = if o.case.device == crate::backend::Device::Cpu {
        limits.map(|l| cpu_roof(l, one_core))
    } else {
        o.roof
    };
    let samples: Vec<_> = o.measurements.iter().flat_map(|m| m.samples.iter().copied()).collect();
    let mut r = CaseResult {
        id: o.case.id.clone(),
        suite: o.case.suite.clone(),
        benchmark: o.case.benchmark.clone(),
        params: o.case.params.clone(),
        status: match (&o.failure, &o.skipped) {
            (Some((phase, reason)), _) => CaseStatus::Failed { phase: phase.clone(), reason: reason.clone() },
            (None, Some(reason)) => CaseStatus::Skipped { reason: reason.clone() },
            (None, None) => CaseStatus::Ok,
        },
        verification: o.verification.clone(),
        sampling: sampling_info(&o.measurements),
        samples,
        estimates: None,
        outliers: None,
        throughput: Vec::new(),
        alloc: merge_alloc(&o.measurements),
        bound: None,
        notes: Vec::new(),
        metrics: o.metrics.clone(),
    };
    if r.status != CaseStatus::Ok || r.samples.is_empty() {
        return r;
    }
    let per_iter: Vec<f64> = r.samples.iter().map(|x| x.per_iter()).collect();
    let (_, classes) = stats::tukey(&per_iter);
    let mut counts = OutlierCounts::default();
    for c in &classes {
        match c {
            OutlierClass::LowSevere => counts.low_severe += 1,
            OutlierClass::LowMild => counts.low_mild += 1,
            OutlierClass::HighMild => counts.high_mild += 1,
            OutlierClass::HighSevere => counts.high_severe += 1,
            OutlierClass::Normal => {}
        }
    }
    let mut analysed = per_iter.clone();
    if s.outliers == OutlierPolicy::Remove && counts.total() > 0 && counts.total() < per_iter.len() {
        analysed = per_iter
            .iter()
            .zip(&classes)
            .filter(|(_, c)| **c == OutlierClass::Normal)
            .map(|(x, _)| *x)
            .collect();
        counts.removed = per_iter.len() - analysed.len();
        r.notes.push(format!(
            "{} outlier sample(s) removed before analysis (--outliers remove)",
            counts.removed
        ));
    }
    let Some(est) = estimates(&analysed, s, &o.case.id) else { return r };
    if est.iqr_over_median > NOISY_IQR_RATIO {
        r.notes.push(format!("noisy: IQR is {:.0}% of the median", est.iqr_over_median * 100.0));
    }
    if let Some(info) = &r.sampling {
        match info.stopped_by {
            StopReason::MaxTime => r.notes.push(format!(
                "max-time cut sampling: {} of {} samples",
                info.samples, info.requested_samples
            )),
            StopReason::MeasurementTime if info.samples < info.requested_samples => r.notes.push(format!(
                "measurement time allowed {} of {} samples",
                info.samples, info.requested_samples
            )),
            _ => {}
        }
    }
    let suspect = r.sampling.as_ref().and_then(|i| i.timing_suspect.as_deref());
    r.notes.extend(screen_notes(&o.measurements, suspect));
    r.throughput = o.throughput.iter().map(|t| rate(t, &est.median, roof)).collect();
    r.bound = roof.and_then(|roof| classify_roof(&o.throughput, est.median.point, roof));
    // A CPU case's % of peak and class from a probe taken while other work
    // ran (used for this run only, never cached) must not read as clean.
    let from_probe = r.bound.is_some() || r.throughput.iter().any(|t| t.pct_of_peak.is_some());
    if o.case.device == crate::backend::Device::Cpu && from_probe {
        r.notes.extend(limits.and_then(MachineLimits::disturbed_note));
    }
    r.outliers = Some(counts);
    r.estimates = Some(est);
    r
}

fn sampling_info(ms: &[Measurement]) -> Option<SamplingInfo> {
    let last = ms.last()?;
    Some(SamplingInfo {
        warm_up_ns: ms.iter().map(|m| m.warm_up_ns).sum(),
        iterations_per_sample: last.iterations_per_sample,
        samples: ms.iter().map(|m| m.samples.len()).sum(),
        requested_samples: ms.iter().map(|m| m.requested).sum(),
        stopped_by: last.stopped_by,
        prepare_ns: ms.iter().map(|m| m.prepare_ns).sum(),
        verify_ns: ms.iter().map(|m| m.verify_ns).sum(),
        placements: ms.iter().map(|m| m.placements).max().filter(|&k| k > 1),
        timing_suspect: suspect_of(ms),
    })
}

/// Why some round's samples are suspect (see `harness::screen`), naming the
/// round when the case ran several.
fn suspect_of(ms: &[Measurement]) -> Option<String> {
    let rounds = ms.iter().filter_map(|m| Some((m.samples.first()?.round, m.screen.suspect.as_ref()?)));
    let all: Vec<String> =
        rounds.map(|(r, why)| if ms.len() > 1 { format!("round {r}: {why}") } else { why.clone() }).collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// Notes on screening: rounds measured again, and a suspect case.
fn screen_notes(ms: &[Measurement], suspect: Option<&str>) -> Vec<String> {
    let mut notes: Vec<String> = ms
        .iter()
        .filter_map(|m| m.screen.remeasured.as_ref())
        .map(|why| format!("measured again: {why}"))
        .collect();
    if let Some(why) = suspect {
        notes.push(format!("timing suspect, not compared: {why}"));
    }
    notes
}

fn merge_alloc(ms: &[Measurement]) -> Option<AllocStats> {
    let mut iters = 0.0;
    let mut out = AllocStats::default();
    for m in ms {
        let a = m.alloc.as_ref()?;
        let n: f64 = m.samples.iter().map(|x| x.iterations as f64).sum();
        out.allocs_per_iter += a.allocs_per_iter * n;
        out.bytes_per_iter += a.bytes_per_iter * n;
        out.peak_bytes = out.peak_bytes.max(a.peak_bytes);
        iters += n;
    }
    if iters == 0.0 {
        return None;
    }
    out.allocs_per_iter /= iters;
    out.bytes_per_iter /= iters;
    Some(out)
}

/// Estimates of per-iteration times (ns); `None` for no data.
pub fn estimates(x: &[f64], s: &Settings, id: &str) -> Option<Estimates> {
    let sum = stats::Summary::new(x)?;
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    let level = s.confidence_level;
    let (mlo, mhi) = stats::median_ci(&sorted, level);
    // Seeded per case so the same samples always give the same interval.
    let (blo, bhi) = stats::bootstrap_mean_ci(x, level, s.bootstrap_resamples, s.seed ^ fnv1a(id));
    Some(Estimates {
        median: Estimate { point: sum.median, lower: mlo, upper: mhi, level },
        mean: Estimate { point: sum.mean, lower: blo, upper: bhi, level },
        std_dev: sum.std_dev,
        mad: sum.mad,
        min: sum.min,
        max: sum.max,
        p50: sum.median,
        p90: sum.p90,
        p99: sum.p99,
        iqr_over_median: if sum.median > 0.0 { (sum.q3 - sum.q1) / sum.median } else { 0.0 },
    })
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// The CPU's roof from its probe: all cores, or one core for `threads=1`
/// cases (triad bandwidth: the probe's streaming figure).
fn cpu_roof(l: &MachineLimits, one_core: bool) -> Roof {
    if one_core {
        Roof { flops_per_sec: l.peak_flops_one_core, bytes_per_sec: l.triad_bandwidth_one_thread }
    } else {
        Roof { flops_per_sec: l.peak_flops_all_cores, bytes_per_sec: l.triad_bandwidth_all_threads }
    }
}

fn peak_for(kind: ThroughputKind, roof: Roof) -> Option<f64> {
    match kind {
        ThroughputKind::Flops => Some(roof.flops_per_sec),
        ThroughputKind::Bytes => Some(roof.bytes_per_sec),
        _ => None,
    }
    .filter(|&p| p > 0.0)
}

fn rate(t: &Throughput, median: &Estimate, roof: Option<Roof>) -> ThroughputEstimate {
    let per_sec = |ns: f64| if ns > 0.0 { t.per_iteration * 1e9 / ns } else { f64::INFINITY };
    let point = per_sec(median.point);
    ThroughputEstimate {
        kind: t.kind,
        per_iteration: t.per_iteration,
        // A longer time is a lower rate: the bounds swap.
        rate: Estimate {
            point,
            lower: per_sec(median.upper),
            upper: per_sec(median.lower),
            level: median.level,
        },
        pct_of_peak: roof.and_then(|r| peak_for(t.kind, r)).map(|p| point / p * 100.0),
    }
}

/// Roofline against the CPU's probed limits ([`classify_roof`]).
pub fn classify(decl: &[Throughput], median_ns: f64, l: &MachineLimits, one_core: bool) -> Option<Bound> {
    classify_roof(decl, median_ns, cpu_roof(l, one_core))
}

/// Roofline: compute- or memory-bound by arithmetic intensity against the
/// device's balance (peak FLOP/s over bandwidth); latency-bound when the
/// case reaches under 10% of the roof that should limit it (overheads, not
/// the device, set its time).
pub fn classify_roof(decl: &[Throughput], median_ns: f64, roof: Roof) -> Option<Bound> {
    let get = |k| decl.iter().find(|t| t.kind == k).map(|t| t.per_iteration).filter(|&v| v > 0.0);
    let flops = get(ThroughputKind::Flops);
    let bytes = get(ThroughputKind::Bytes);
    let peak = peak_for(ThroughputKind::Flops, roof)?;
    let bw = peak_for(ThroughputKind::Bytes, roof)?;
    let secs = median_ns / 1e9;
    let (bound, attainable_secs) = match (flops, bytes) {
        (Some(f), Some(b)) => {
            if f / b > peak / bw {
                (Bound::Compute, f / peak)
            } else {
                (Bound::Memory, b / bw)
            }
        }
        (Some(f), None) => (Bound::Compute, f / peak),
        (None, Some(b)) => (Bound::Memory, b / bw),
        (None, None) => return None,
    };
    Some(if attainable_secs < LATENCY_BOUND_FRACTION * secs { Bound::Latency } else { bound })
}

/// Evaluates the suites' performance targets against this run's results.
pub fn evaluate_targets(
    specs: &[TargetSpec],
    cases: &[CaseResult],
    limits: Option<&MachineLimits>,
) -> Vec<TargetCheck> {
    let Some(l) = limits else { return Vec::new() };
    let mut out = Vec::new();
    for spec in specs {
        let Ok(re) = regex::Regex::new(spec.case_pattern) else { continue };
        let matched: Vec<&CaseResult> = cases.iter().filter(|c| re.is_match(&c.id)).collect();
        // A case's rate of the spec's kind; a failed case has none, and under
        // `Every` counts as 0 so the target is not met.
        let rate = |c: &CaseResult| {
            if c.status.is_failed() {
                return None;
            }
            c.throughput.iter().find(|t| t.kind == spec.kind).map(|t| t.rate.point)
        };
        let pick = match spec.matching {
            TargetMatch::Fastest => {
                matched.iter().filter_map(|c| rate(c).map(|r| (*c, r))).max_by(|a, b| a.1.total_cmp(&b.1))
            }
            TargetMatch::Every => matched
                .iter()
                .filter(|c| c.status.is_failed() || rate(c).is_some())
                .map(|c| (*c, rate(c).unwrap_or(0.0)))
                .min_by(|a, b| a.1.total_cmp(&b.1)),
        };
        let Some((case, measured)) = pick else { continue };
        let name = match spec.matching {
            TargetMatch::Fastest => spec.name.to_string(),
            TargetMatch::Every => format!("{}; slowest of {} cases", spec.name, matched.len()),
        };
        let limit = match spec.limit {
            Limit::PeakFlopsAllCores => l.peak_flops_all_cores,
            Limit::PeakFlopsOneCore => l.peak_flops_one_core,
            Limit::TriadAllThreads => l.triad_bandwidth_all_threads,
            Limit::TriadOneThread => l.triad_bandwidth_one_thread,
        };
        let ratio = measured / limit;
        // No code outruns the FMA peak: a case that seems to exposes a
        // probe taken while the machine was busy. Bandwidth gets no such
        // bound: a kernel may stream better than the triad probe does.
        let peak_flops = matches!(spec.limit, Limit::PeakFlopsAllCores | Limit::PeakFlopsOneCore);
        let caveat = (peak_flops && ratio > 1.0).then(|| {
            format!(
                "no verdict: {} ran at {:.0}% of the probed FMA peak, which no code can do, so the probe ran while the \
                 machine was busy; re-probe on a quiet machine (tfbench sysinfo --probe)",
                case.id,
                ratio * 100.0
            )
        });
        // A disturbed probe's limits read low, so its ratios read high: a
        // "met" cannot be trusted, while "not met" stands (the true limit is
        // higher still, and the true ratio lower).
        let caveat = caveat.or_else(|| {
            let crate::probe::LoadState::Disturbed(share) = l.load_state() else { return None };
            (ratio >= spec.required).then(|| {
                format!(
                    "no verdict: the probe ran while other work took {:.0}% of a core, so its limit reads low and \
                     the ratio high; re-probe on a quiet machine (tfbench sysinfo --probe)",
                    share * 100.0
                )
            })
        });
        out.push(TargetCheck {
            name,
            case_id: case.id.clone(),
            measured,
            limit,
            unit: spec.kind.rate_unit().to_string(),
            ratio,
            required: spec.required,
            met: ratio >= spec.required && caveat.is_none(),
            caveat,
        });
    }
    out
}

#[cfg(test)]
mod tests {
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
            }],
        }
    }

    #[test]
    fn rates_invert_the_time_interval_and_scale_to_peak() {
        let times: Vec<f64> = (0..50).map(|i| 1000.0 + (i % 5) as f64).collect();
        let r = analyze(
            &outcome(&times, vec![Throughput::flops(100_000.0)]),
            &Settings::default(),
            Some(&limits()),
        );
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
        assert!(
            caveat.contains("t/mm/a") && caveat.contains("105%") && caveat.contains("--probe"),
            "{caveat}"
        );
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
}
